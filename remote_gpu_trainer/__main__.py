from remote_gpu_trainer.cli import run

run()
