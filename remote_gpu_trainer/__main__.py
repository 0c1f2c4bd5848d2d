from remote_gpu_trainer.cli import main

raise SystemExit(main())
