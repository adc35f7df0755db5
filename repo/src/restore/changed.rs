//! `--only-changed-since`: a block image restored onto a device (or image file) that
//! still holds an older snapshot of the same source, writing only the blocks in which the
//! two snapshots differ. What the target holds is mostly the caller's word: kura reads
//! a few of its blocks to check it ([`spot_check`]), not all of them (that would cost
//! the reading the option saves).

use crate::blocks::{Blocks, push_entry};
use crate::error::{RepoError, Result};
use crate::repository::Repository;
use crate::storage::Storage;
use crate::tree::{Node, NodeType};

use super::target::{FileTarget, one_file};
use super::write::{Holes, write_file_at};

/// What an incremental restore wrote.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ChangedRestore {
    /// The image's size.
    pub bytes: u64,
    /// Bytes of the blocks that differed, written (or zeroed).
    pub written: u64,
}

/// Restores `node` onto `target`, which holds `since` (an older snapshot's node of the
/// same source, in blocks of `block` bytes): only the blocks whose blob or hole differs
/// are written; holes are zeroed by the device as a full restore's are. `before_since`,
/// where given, is the image of `since`'s own parent: the check of the target then also
/// reads blocks that `since` changed from it, which a target still holding that parent
/// (a standby one backup behind) gets wrong.
///
/// # Errors
/// [`RepoError::WrongParent`] when the two images differ in size, or the target does not
/// hold `since` as far as the check reads; [`RepoError::Corrupt`] when either is not of
/// whole blocks of `block` bytes; storage, verification and write errors.
pub async fn restore_changed_to<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    (since, before_since): (&Node, Option<&Node>),
    block: u64,
    target: FileTarget,
) -> Result<ChangedRestore> {
    one_file(node)?;
    one_file(since)?;
    let size = node.size.unwrap_or(0);
    if since.size != Some(size) {
        return Err(RepoError::WrongParent(format!(
            "the older snapshot's image holds {} bytes, this one {size}; nothing was written",
            since.size.unwrap_or(0)
        )));
    }
    let path = target.path().to_path_buf();
    let holes = Holes::WriteZeros {
        discard: super::write::thin_block(&target.file),
    };
    repo.progress.set_total(size);
    spot_check(repo, node, (since, before_since), &target, block).await?;
    let mut new = Blocks::new(node.content.as_deref().unwrap_or_default(), size, block)?;
    let mut old = Blocks::new(since.content.as_deref().unwrap_or_default(), size, block)?;
    let mut written = 0u64;
    // The stretch of differing blocks being gathered: its offset and its content.
    let mut stretch: Option<(u64, Node)> = None;
    let mut at = 0u64;
    for _ in 0..Blocks::count(size, block) {
        let (a, b) = match (new.next(), old.next()) {
            (Some(a), Some(b)) => (a?, b?),
            _ => {
                return Err(RepoError::corrupt(
                    "block image",
                    "it has fewer blocks than its size",
                ));
            }
        };
        let len = block.min(size - at);
        if a == b {
            if let Some((base, part)) = stretch.take() {
                written += write_file_at(repo, &part, &target.file, &path, holes, base).await?;
            }
            repo.progress.add_bytes(len);
        } else {
            let (_, part) = stretch.get_or_insert_with(|| {
                (
                    at,
                    Node {
                        kind: Some(NodeType::File),
                        content: Some(Vec::new()),
                        size: Some(0),
                        ..Node::default()
                    },
                )
            });
            push_entry(part.content.get_or_insert_default(), len, a);
            part.size = Some(part.size.unwrap_or(0) + len);
        }
        at += len;
    }
    if let Some((base, part)) = stretch.take() {
        written += write_file_at(repo, &part, &target.file, &path, holes, base).await?;
    }
    target
        .file
        .sync_all()
        .map_err(|e| RepoError::io(&path, e))?;
    Ok(ChangedRestore {
        bytes: size,
        written,
    })
}

/// What a block both snapshots hold alike is, for the spot check.
#[derive(Clone, Copy)]
enum Shared {
    Blob,
    Hole,
    /// Changed by the older snapshot from its parent.
    ChangedBefore,
}

/// Calls `each(offset, blob, kind)` for every block that `node` and `since` hold alike
/// (the same blob, or both a hole); with `before_since` (of the same size), one that
/// differs there from `since` is [`Shared::ChangedBefore`].
fn shared_blocks<'a>(
    node: &'a Node,
    (since, before_since): (&'a Node, Option<&'a Node>),
    block: u64,
    mut each: impl FnMut(u64, Option<crate::id::Id>, Shared),
) -> Result<()> {
    let size = node.size.unwrap_or(0);
    let blocks = |n: &'a Node| Blocks::new(n.content.as_deref().unwrap_or_default(), size, block);
    let (new, old) = (blocks(node)?, blocks(since)?);
    let mut before = before_since.map(blocks).transpose()?;
    for (i, (a, b)) in new.zip(old).enumerate() {
        let (a, b) = (a?, b?);
        let was = before.as_mut().and_then(Iterator::next).transpose()?;
        if a == b {
            let kind = if before.is_some() && was != Some(b) {
                Shared::ChangedBefore
            } else if a.is_some() {
                Shared::Blob
            } else {
                Shared::Hole
            };
            each(i as u64 * block, a, kind);
        }
    }
    Ok(())
}

/// Blocks of the target read and hashed before anything is written.
const SPOT_CHECKS: usize = 16;

/// Refuses a target that does not hold `since`: up to [`SPOT_CHECKS`] blocks that both
/// snapshots hold as the same blob, spread over the image, are read from the target and
/// must hash to that blob, and as many that both hold as holes must read as zeros (those
/// are never written, so a target holding something else there would keep it); with
/// `before_since`, as many again of the shared blocks that `since` changed from its
/// parent, which a target one backup behind holds wrong (among all shared blocks, 16
/// samples would rarely meet them). Cheap (48 blocks at most), and it catches the likely
/// mistakes: the live volume, a device of another source, or a standby one backup behind,
/// given for the older snapshot's copy. Two snapshots that share no block leave nothing
/// to check, and are refused.
async fn spot_check<S: Storage>(
    repo: &Repository<S>,
    node: &Node,
    (since, before_since): (&Node, Option<&Node>),
    target: &FileTarget,
    block: u64,
) -> Result<()> {
    let size = node.size.unwrap_or(0);
    // `since`'s parent counts where it is of the same size.
    let before_since = before_since.filter(|b| b.size == Some(size));
    // Two passes over the images, so that nothing grows with their size: the shared
    // blocks of each kind counted, then every so many of them picked.
    let mut counts = [0usize; 3];
    shared_blocks(node, (since, before_since), block, |_, _, kind| {
        counts[kind as usize] += 1;
    })?;
    if counts == [0; 3] {
        return Err(RepoError::WrongParent(
            "the two snapshots share no block, so nothing shows that the target holds the \
             older one; restore the snapshot whole; nothing was written"
                .into(),
        ));
    }
    let steps = counts.map(|n| n.div_ceil(SPOT_CHECKS).max(1));
    let mut seen = [0usize; 3];
    let mut picked: Vec<(u64, Option<crate::id::Id>)> = Vec::new();
    shared_blocks(node, (since, before_since), block, |at, id, kind| {
        let k = kind as usize;
        if seen[k].is_multiple_of(steps[k]) {
            picked.push((at, id));
        }
        seen[k] += 1;
    })?;
    let file = target
        .file
        .try_clone()
        .map_err(|e| RepoError::io(target.path(), e))?;
    let path = target.path().to_path_buf();
    let reads: Vec<(u64, u64)> = picked
        .iter()
        .map(|&(at, _)| (at, block.min(size - at)))
        .collect();
    let read = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt as _;
        reads
            .into_iter()
            .map(|(at, len)| {
                let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
                file.read_exact_at(&mut buf, at).map(|()| buf)
            })
            .collect::<std::io::Result<Vec<Vec<u8>>>>()
    })
    .await
    .map_err(|e| RepoError::task("spot check", &e))?
    .map_err(|e| RepoError::io(&path, e))?;
    for ((at, id), bytes) in picked.iter().zip(read) {
        let as_older = match id {
            Some(id) => repo.config.id_key.id(&bytes) == *id,
            None => bytes.iter().all(|&b| b == 0),
        };
        if !as_older {
            return Err(RepoError::WrongParent(format!(
                "{}'s block at byte {at} is not what the older snapshot holds there: the \
                 target does not hold that snapshot, and writing only the changed blocks \
                 would leave a mix; nothing was written",
                path.display()
            )));
        }
    }
    Ok(())
}
