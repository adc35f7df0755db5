//! The repository's typed errors.

/// What can go wrong reading or writing a repository.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepoError {
    /// The storage (the gateway, or what stands behind it) failed or refused a request.
    #[error("storage: {0}")]
    Storage(String),
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
}

impl RepoError {
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

/// Results of repository operations.
pub type Result<T> = std::result::Result<T, RepoError>;
