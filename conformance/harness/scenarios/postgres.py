"""Postgres point-in-time recovery through the gateway with Barman Cloud, as CloudNativePG
runs it: Debian's PostgreSQL server archives its WAL with `barman-cloud-wal-archive`
(gzip, as CloudNativePG's `wal.compression: gzip`), `barman-cloud-backup` takes a base
backup, rows are committed before and after a target time, and `barman-cloud-restore` plus
`barman-cloud-wal-restore` as `restore_command` bring a new data directory to that time.
SQL then shows the rows before the target, byte for byte (an MD5 over them), and none
after it. Also the archive check, the backup list and the backup delete.

Postgres refuses to run as root, so when the harness is root every server and every
barman command runs as the `postgres` user of Debian's package; barman then comes from a
virtualenv that user can read (`KURA_CONFORMANCE_BARMAN`, set by conformance/run)."""

import glob
import json
import os
import pwd
import time
from pathlib import Path

from ..context import StepFailed, check
from ..upstreams import ROOT, free_port

CLIENT = "postgres"
SERVER = "pg"  # barman's server name: the folder under the bucket's path
ROWS_BEFORE = 5000  # rows committed before the target time
ROWS_AFTER = 700  # rows committed after it, which the restore must not have


def barman_bin():
    return Path(os.environ.get("KURA_CONFORMANCE_BARMAN", ROOT / "target" / "conformance-barman")) / "bin"


def pg_bin():
    """The newest Debian PostgreSQL server's programs."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("no PostgreSQL server: apt-get install postgresql")
    return Path(found[-1]).parent


def version(ctx):
    pg = ctx.run(pg_bin() / "postgres", "--version").strip()
    barman = ctx.run(barman_bin() / "barman-cloud-backup", "--version").strip()
    return f"{barman}; {pg} (Debian)"


class Pg:
    """One Postgres server on a Unix socket in its own folder, run as `user`."""

    def __init__(self, ctx, user, data, env):
        self.ctx, self.user, self.data, self.env = ctx, user, Path(data), env
        self.port = free_port()
        self.socket_dir = self.data.parent / f"socket-{self.data.name}"

    def run(self, *cmd, **kw):
        return self.ctx.run(*cmd, env=self.env, user=self.user, **kw)

    def configure(self, **settings):
        """Appends settings to postgresql.conf, where a later line wins."""
        lines = [f"{k} = '{v}'" if isinstance(v, str) else f"{k} = {v}" for k, v in settings.items()]
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\n# kura conformance\n" + "\n".join(lines) + "\n")

    def start(self):
        self.socket_dir.mkdir(exist_ok=True)
        chown(self.socket_dir, self.user)
        self.configure(port=self.port, listen_addresses="", unix_socket_directories=str(self.socket_dir))
        self.run(pg_bin() / "pg_ctl", "-D", self.data, "-l", self.data.parent / f"{self.data.name}.log",
                 "-w", "-t", "120", "start")

    def stop(self):
        if (self.data / "postmaster.pid").exists():
            try:
                self.run(pg_bin() / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
            except Exception as e:  # noqa: BLE001 -- stopping is best effort in cleanup
                print(f"  (stopping {self.data.name}: {e})")

    def sql(self, query):
        out = self.run(pg_bin() / "psql", "-h", self.socket_dir, "-p", self.port, "-U", "postgres", "-d", "postgres",
                       "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query)
        return out.strip()


def chown(path, user):
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def run(ctx):
    bucket = ctx.upstream.bucket_name(CLIENT)
    dest = f"s3://{bucket}/cluster-1"
    user = "postgres" if os.geteuid() == 0 else None
    work = ctx.work / CLIENT
    work.mkdir()
    if user:
        # The scratch directory is 0700 (mkdtemp); the postgres user must reach its folder.
        os.chmod(ctx.work, 0o711)
        chown(work, user)
    # The servers run the archive and restore commands with their own environment: the
    # gateway's client credentials, and a PATH that finds barman.
    env = ctx.client_env(PATH=f"{barman_bin()}:{os.environ['PATH']}", HOME=str(work))
    cloud = ["--cloud-provider", "aws-s3", "--endpoint-url", ctx.gateway_url, "--addressing-style", "path"]
    barman = lambda name, *a: ctx.run(barman_bin() / f"barman-cloud-{name}", *cloud, *a, env=env, user=user)  # noqa: E731
    source = Pg(ctx, user, work / "source", env)
    restored = Pg(ctx, user, work / "restored", env)
    try:
        with ctx.step(CLIENT, "initdb; archive check on an empty archive"):
            ctx.gateway_s3().create_bucket(Bucket=bucket)
            barman("check-wal-archive", dest, SERVER)
            source.run(pg_bin() / "initdb", "-D", source.data, "-U", "postgres", "--auth", "trust", "-E", "UTF8")
            source.configure(
                wal_level="replica",
                archive_mode="on",
                archive_command=f"barman-cloud-wal-archive {' '.join(cloud)} -z {dest} {SERVER} %p",
                archive_timeout=0,
            )
            source.start()
        with ctx.step(CLIENT, "WAL archiving (barman-cloud-wal-archive)"):
            source.sql("CREATE TABLE ledger (id int PRIMARY KEY, note text NOT NULL)")
            source.sql(f"INSERT INTO ledger SELECT g, md5(g::text) || repeat('x', g % 300) FROM generate_series(1, {ROWS_BEFORE // 2}) g")
            wait_archived(source)
        with ctx.step(CLIENT, "base backup (barman-cloud-backup)"):
            barman("backup", "-h", source.socket_dir, "-p", source.port, "-U", "postgres", "-d", "postgres", dest, SERVER)
            backups = list_backups(barman, dest)
            check(len(backups) == 1, f"{len(backups)} backups listed, expected 1")
            backup_id = backups[0]["backup_id"]
        with ctx.step(CLIENT, "commits before and after a target time"):
            source.sql(
                f"INSERT INTO ledger SELECT g, md5(g::text) || repeat('y', g % 300) "
                f"FROM generate_series({ROWS_BEFORE // 2 + 1}, {ROWS_BEFORE}) g"
            )
            expected = digest(source, ROWS_BEFORE)
            time.sleep(1.5)
            target = source.sql("SELECT now()")
            time.sleep(1.5)
            for first in range(ROWS_BEFORE + 1, ROWS_BEFORE + ROWS_AFTER, 100):  # several commits
                source.sql(f"INSERT INTO ledger SELECT g, 'after' FROM generate_series({first}, {first + 99}) g")
            wait_archived(source)
        with ctx.step(CLIENT, "archive check: in use, safe for timeline 2"):
            try:
                barman("check-wal-archive", dest, SERVER)
            except StepFailed:
                pass
            else:
                raise StepFailed("check-wal-archive passed on an archive that holds WAL")
            barman("check-wal-archive", "--timeline", "2", dest, SERVER)
        with ctx.step(CLIENT, "restore to the target time (barman-cloud-restore, wal-restore)"):
            restored.data.mkdir()
            os.chmod(restored.data, 0o700)
            chown(restored.data, user)
            barman("restore", dest, SERVER, backup_id, restored.data)
            (restored.data / "recovery.signal").touch()
            chown(restored.data / "recovery.signal", user)
            restored.configure(
                archive_mode="off",
                restore_command=f"barman-cloud-wal-restore {' '.join(cloud)} {dest} {SERVER} %f %p",
                recovery_target_time=target,
                recovery_target_action="promote",
            )
            restored.start()
            deadline = time.monotonic() + 120
            while restored.sql("SELECT pg_is_in_recovery()") != "f":
                check(time.monotonic() < deadline, "the restored server did not leave recovery in 120 s")
                time.sleep(0.5)
        with ctx.step(CLIENT, "SQL: rows before the target, none after"):
            count = int(restored.sql("SELECT count(*) FROM ledger"))
            check(count == ROWS_BEFORE, f"restored ledger holds {count} rows, expected {ROWS_BEFORE}")
            check(digest(restored, ROWS_BEFORE) == expected, "restored rows differ from the source's")
            after = int(source.sql(f"SELECT count(*) FROM ledger WHERE id > {ROWS_BEFORE}"))
            check(after == ROWS_AFTER, f"source holds {after} rows after the target, expected {ROWS_AFTER}")
        with ctx.step(CLIENT, "upstream holds only ciphertext"):
            ctx.assert_only_ciphertext(bucket, min_objects=4)
        with ctx.step(CLIENT, "backup-delete, then backup-list is empty"):
            barman("backup-delete", "--backup-id", backup_id, dest, SERVER)
            check(list_backups(barman, dest) == [], "backup still listed after backup-delete")
            left = [o["Key"] for o in ctx.upstream.s3().list_objects_v2(
                Bucket=ctx.upstream.bucket(bucket), Prefix=f"cluster-1/{SERVER}/base/").get("Contents", [])]
            check(not left, f"base backup objects left upstream: {left[:3]}")
    finally:
        restored.stop()
        source.stop()


def list_backups(barman, dest):
    return json.loads(barman("backup-list", "--format", "json", dest, SERVER))["backups_list"]


def digest(pg, upto):
    return pg.sql(f"SELECT md5(string_agg(id || ':' || note, ',' ORDER BY id)) FROM ledger WHERE id <= {upto}")


def wait_archived(pg, timeout=120):
    """Switches to a new WAL segment and waits until the archiver has shipped the old one."""
    segment = pg.sql("SELECT pg_walfile_name(pg_switch_wal())")
    deadline = time.monotonic() + timeout
    while True:
        last, failed = pg.sql("SELECT coalesce(last_archived_wal, '-'), failed_count FROM pg_stat_archiver").split("|")
        if last >= segment:
            return
        check(time.monotonic() < deadline, f"WAL {segment} not archived in {timeout} s ({failed} archive failures)")
        time.sleep(0.3)
