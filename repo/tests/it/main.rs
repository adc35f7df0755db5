//! The repository end to end: `kura-repo` → kura gateway (in-process, loopback HTTP) →
//! s3s-fs (in-process, loopback HTTP). One binary, a module per topic.

mod harness;

mod backup_restore;
mod changed_blocks;
mod forget;
mod init;
mod integrity;
mod lease;
mod many_snapshots;
mod redirect;
mod restore_in_place;
mod retry;
mod sessions;
mod small_files;
mod sparse;
mod torn;
mod upkeep;
