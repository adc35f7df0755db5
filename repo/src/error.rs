//! The repository's typed errors.

/// What can go wrong reading or writing a repository.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepoError {
    /// The storage (the gateway, or what stands behind it) failed or refused a request.
    #[error("storage: {op} {key}: {detail}")]
    Storage {
        /// The request (`GetObject`, `PutObject`, ...).
        op: &'static str,
        /// The object or bucket it was for.
        key: String,
        /// What the storage answered, or why it could not be reached.
        detail: String,
    },
    /// A repository location that is not of the form `s3://BUCKET[/PREFIX]`.
    #[error("repository location {location:?}: {why}")]
    BadLocation {
        /// The location as given.
        location: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The backup's caller stopped waiting for it (dropped its future, on a timeout say):
    /// its walk, on a thread of its own, stopped at its next batch of chunks or
    /// directory. Nothing is lost: what it uploaded is a stopped backup's, and no snapshot
    /// was written.
    #[error("the backup was given up by its caller before it ended; no snapshot was written")]
    Abandoned,
    /// A thread or task that a backup or restore runs its work on panicked or was
    /// cancelled.
    #[error("{what}: {detail}")]
    Task {
        /// Which (`upload task`, `backup thread`, ...).
        what: &'static str,
        /// How it ended.
        detail: String,
    },
    /// Another `prune` or `forget` holds the repository's upkeep lease.
    #[error(
        "the repository is busy: {command} by {holder} holds its lease (refreshed {age_secs} s ago); try again when it is done"
    )]
    Busy {
        /// Host and process of the holder.
        holder: String,
        /// What it runs.
        command: String,
        /// Seconds since it last refreshed the lease, in storage time.
        age_secs: u64,
    },
    /// This run's upkeep lease was taken over (it was paused past the lease's lifetime);
    /// it stopped before deleting anything more.
    #[error(
        "another run took over the repository's upkeep lease while this one was paused; stopped before deleting anything more"
    )]
    LeaseLost,
    /// A backup's session went stale (the process was paused, or cut off from the
    /// storage, for longer than the session timeout): a prune may meanwhile have deleted
    /// packs it relies on, so it wrote no snapshot, or deleted the one it wrote.
    #[error(
        "this backup's session lapsed: it was paused or cut off from the storage for {gap_secs} s, \
         longer than the repository's session timeout ({timeout_secs} s), so a prune may have \
         deleted data it relies on; no snapshot was kept. Run the backup again: it reuses \
         what was uploaded"
    )]
    SessionLapsed {
        /// The longest gap between two refreshes of the session, in storage seconds.
        gap_secs: u64,
        /// The session timeout.
        timeout_secs: u64,
    },
    /// A grace period shorter than the repository's minimum (its config).
    #[error(
        "a grace period of {asked_secs} s is shorter than this repository's minimum of {min_secs} s \
         (set at init); a flag may lengthen the grace period, never shorten it"
    )]
    GraceTooShort {
        /// The grace period asked for.
        asked_secs: u64,
        /// The repository's.
        min_secs: u64,
    },
    /// The command whose output a backup stored (`Source::Command`) did not exit 0, or
    /// could not be run: its output is not taken for complete, and no snapshot was
    /// written (what was uploaded stays indexed, for the next run to reuse).
    #[error("the command {program:?} {how}; no snapshot was written")]
    CommandFailed {
        /// The program's name (not its arguments, which may hold a password).
        program: String,
        /// How it ended: `exited with status 3`, `was killed by signal 9`, ...
        how: String,
    },
    /// `latest` named the newest snapshot of more than one group of host and paths (two
    /// volumes of one node, say): which one was meant is not guessed.
    #[error(
        "`latest` is ambiguous: the snapshots it could name belong to {} hosts and paths (listed \
         above); choose with --host, --path or --tag, or give a snapshot ID",
        candidates.len()
    )]
    AmbiguousLatest {
        /// The newest snapshot of each group, by host and paths.
        candidates: Vec<LatestCandidate>,
    },
    /// A block device to restore onto is mounted or held by another program.
    #[error("{path} is in use (mounted, or held by another program); nothing was written")]
    DeviceBusy {
        /// The device.
        path: String,
    },
    /// A block device to restore onto is smaller than the image.
    #[error("{path} holds {size} bytes, less than the image's {needed}; nothing was written")]
    TargetTooSmall {
        /// The device.
        path: String,
        /// Its size in bytes.
        size: u64,
        /// The image's size in bytes.
        needed: u64,
    },
    /// A file of extents (`--changed`, `--allocated`) that does not parse, or says
    /// something impossible (an extent past the source's end).
    #[error("extents file: {0}")]
    Extents(String),
    /// A block backup's parent (or a restore's `--only-changed-since` snapshot) that the
    /// changed blocks cannot be taken from: another source, another size, or not a block
    /// backup, or a target that does not hold the older snapshot. Nothing was read or
    /// written when it is returned.
    #[error("{0}")]
    WrongParent(String),
    /// The system's random source failed (creating a repository's ID key).
    #[error("the system's random source failed")]
    Random,
    /// An object the repository needs is not there.
    #[error("not found: {0}")]
    NotFound(String),
    /// `kura init` found a repository already there.
    #[error("a repository already exists at this location")]
    AlreadyExists,
    /// An object did not parse, or a blob did not hash to its ID.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// Which object or blob.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
    /// A request that cannot be carried out as given (parameters out of range, an empty
    /// retention policy).
    #[error("{0}")]
    Invalid(String),
    /// Blobs that snapshots use are listed by no index object (one was lost or deleted):
    /// prune refuses to run, since it would take their packs for unused.
    #[error(
        "{} blob(s) that snapshots use are in no index object ({}); prune refuses to run: \
         `kura repair index` rebuilds the index from the packs (if they stay unindexed, \
         their packs are lost: `kura check` names the snapshots that use them)",
        blobs.len(), short_list(blobs)
    )]
    Unindexed {
        /// The blobs' IDs, in hex.
        blobs: Vec<String>,
    },
    /// The repository was written by a format version this program does not read.
    #[error("unsupported repository version {0}")]
    Version(u32),
    /// A local file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A file whose writing failed could not be removed: it stays at its name, short.
    #[error("{path}: {why}; what was written of it could not be removed and stays, short")]
    LeftShort {
        /// The file.
        path: String,
        /// Why its writing failed.
        why: String,
    },
}

/// The newest snapshot of one group that `latest` could have named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatestCandidate {
    /// Its host.
    pub host: String,
    /// Its paths.
    pub paths: Vec<String>,
    /// Its ID, in hex.
    pub id: String,
    /// Its time, as recorded.
    pub time: String,
}

impl std::fmt::Display for LatestCandidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host {}, paths [{}]: newest {} at {}",
            self.host,
            self.paths.join(", "),
            self.id.get(..8).unwrap_or(&self.id),
            self.time
        )
    }
}

impl RepoError {
    /// A thread or task `what` that ended without its result.
    pub(crate) fn task(what: &'static str, e: &tokio::task::JoinError) -> Self {
        Self::Task {
            what,
            detail: e.to_string(),
        }
    }

    pub(crate) fn corrupt(what: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        Self::Corrupt {
            what: what.into(),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// The first few IDs of `ids`, short, and how many more.
fn short_list(ids: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut s: Vec<String> = ids
        .iter()
        .take(SHOWN)
        .map(|id| id.get(..8).unwrap_or(id).to_string())
        .collect();
    if ids.len() > SHOWN {
        s.push(format!("and {} more", ids.len() - SHOWN));
    }
    s.join(", ")
}

/// Results of repository operations.
pub type Result<T> = std::result::Result<T, RepoError>;
