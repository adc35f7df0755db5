"""One module per client program; each has `CLIENT` (its row name), `version(ctx)` and
`run(ctx)`, which records one row per operation through `ctx.step`. `ALL` runs by default
(and in CI); `ON_DEMAND` only when named with `--only` (their tools take too long to
install for CI)."""

from . import awscli, awssdkgo, boto3_sdk, minio_go, postgres, rclone, restic, rustic, s3cmd, velero, versioned

ALL = [velero, awssdkgo, minio_go, awscli, boto3_sdk, s3cmd, rclone, restic, postgres, versioned]
ON_DEMAND = [rustic]
