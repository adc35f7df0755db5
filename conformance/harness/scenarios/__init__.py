"""One module per client program; each has `CLIENT` (its row name), `version(ctx)` and
`run(ctx)`, which records one row per operation through `ctx.step`."""

from . import awscli, boto3_sdk, rclone, restic, s3cmd, velero, versioned

ALL = [velero, awscli, boto3_sdk, s3cmd, rclone, restic, versioned]
