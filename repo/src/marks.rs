//! Prune marks (FORMAT.md section 9): the `prune/ID` objects in which phase 1 of a prune
//! lists the packs no snapshot uses, read again by phase 2 of a later prune and by every
//! backup as it starts. Here so that backup and prune share the format without backup
//! depending on prune.

use std::collections::HashSet;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::config::now_rfc3339;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::repository::Repository;
use crate::storage::{FileType, Storage};

/// One prune mark: the packs found unused, and when.
#[derive(Serialize, Deserialize)]
pub(crate) struct Mark {
    /// When phase 1 found them unused (RFC 3339).
    pub(crate) time: String,
    /// The packs.
    pub(crate) packs: Vec<Id>,
}

/// The packs that prune marks list (phase 1 done, phase 2 not yet): a backup opened now
/// must not rely on them, since a prune may delete them before it ends.
///
/// # Errors
/// Storage errors, or a mark that does not parse.
pub(crate) async fn marked_packs<S: Storage>(repo: &Repository<S>) -> Result<HashSet<Id>> {
    let marks = read_marks(repo).await?;
    Ok(marks.marks.into_iter().flat_map(|(_, m)| m.packs).collect())
}

/// The prune marks read, and those ignored.
pub(crate) struct Marks {
    /// Every mark whose content matches its name, by name.
    pub(crate) marks: Vec<(String, Mark)>,
    /// The names of marks whose content does not match their name (damaged, or not
    /// written by kura). Every reader ignores them alike, which is safe: no prune deletes
    /// by them, and a pack they list that is still unused is marked afresh (a new grace
    /// period). Refusing instead would stop every backup until someone deletes the mark.
    pub(crate) ignored: Vec<String>,
}

/// Every prune mark, by name, each checked against its name (FORMAT.md section 9). A mark
/// listed and then deleted (by a prune's phase 2) before it is read is gone, not an error.
pub(crate) async fn read_marks<S: Storage>(repo: &Repository<S>) -> Result<Marks> {
    let mut read = Marks {
        marks: Vec::new(),
        ignored: Vec::new(),
    };
    for (name, _) in repo.storage.list(FileType::PruneMark).await? {
        let bytes = match repo.storage.get(FileType::PruneMark, &name).await {
            Err(RepoError::NotFound(_)) => continue,
            got => got?,
        };
        if repo.config.id_key.id(&bytes).to_hex() != name {
            read.ignored.push(name);
            continue;
        }
        let mark: Mark = serde_json::from_slice(&bytes)
            .map_err(|e| RepoError::corrupt(format!("prune/{name}"), e))?;
        read.marks.push((name, mark));
    }
    Ok(read)
}

/// Stores a mark of `packs`, dated now.
pub(crate) async fn write_mark<S: Storage>(repo: &Repository<S>, packs: Vec<Id>) -> Result<()> {
    let bytes = serde_json::to_vec(&Mark {
        time: now_rfc3339(),
        packs,
    })
    .map_err(|e| RepoError::corrupt("prune mark", e))?;
    let id = repo.config.id_key.id(&bytes);
    repo.storage
        .put(FileType::PruneMark, &id.to_hex(), Bytes::from(bytes))
        .await
}

/// Deletes the mark `name` (phase 2, once its packs are dealt with).
pub(crate) async fn delete_mark<S: Storage>(repo: &Repository<S>, name: &str) -> Result<()> {
    repo.storage.delete(FileType::PruneMark, name).await
}
