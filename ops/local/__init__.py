"""The local path, no AWS account: ./platform up's steps, the emulator (moto on 127.0.0.1) it deploys dev to, the
read-back report of what the emulator really made, and the example job's local run."""
