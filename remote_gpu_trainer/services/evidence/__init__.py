"""The evidence chain: build the manifest on the box, pull it resumably, verify locally, feed the gate.

docs/gate.md §3-§7 and docs/remote-ops.md §8. Trust the artifact, not the claim: the builder's hash
is recorded at build time (trust boundary 1), the pull checks every byte against it while streaming, and
verification re-derives everything from the local bytes before it writes PULL_VERIFIED.json, which it
deletes first so a failed or interrupted run never leaves an old success behind.

One module per step; import each name from the module that holds it (this package re-exports nothing):

- `manifest`: building the manifest on the box (`build_manifest`), reading the box's manifest for the pull,
  and re-reading it for the gate's G2 (`remote_manifest`).
- `pull`: the resumable pull (`pull`, `PullProgress`, `PullResult`): how many files at once, retries, and
  naming why a file failed.
- `pull_local`: where pulled bytes land on the local disk (`.part`, resume, fsync, rename, same-inode check).
- `pull_batches`: the small-file path, many small files down one command.
- `verify`: local verification and the PULL_VERIFIED marker (`verify`, `VerifyResult`, `FileStatus`), and
  `checkpoint_statuses`, the cheap view of the last verification for dashboards.
- `read_only`: the verified copy made read-only before its record and marker are written (`seal_verified`),
  a guard for the evidence store (docs/deliver.md §1), never what the gate trusts.
- `load_checks`: load-verifying checkpoints in a pool of long-lived load-check processes (`LoadCheckPool`,
  `isolated_environment`); torch is never imported in this process.
- `verbs`: `rgt pull` and `rgt verify` as every face calls them (`pull_run`, `verify_run`): the run's lock
  and the events that say how each ended.
- `local_root`: what pull, verification and the gate share: the one walk of the local root and the hash cache
  (the safe lstat/read and folder fsync they use are fsutil.py's).

What the gate decides on is gathered by `services/gate.py` (`gather_gate_inputs`) from these pieces.
Nothing here imports Textual.
"""
