//! A block image's content (FORMAT.md section 5.2) block by block, and how a content
//! list is built: what an incremental
//! backup takes from its parent for the blocks that did not change, and what a restore
//! with `--only-changed-since` compares between two snapshots. Shared by `backup/` and
//! `restore/`, which do not import each other.

use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::tree::Content;

/// The blocks of `size` bytes of `content` cut in `block`-byte blocks, in order: each
/// one's blob, or `None` for a block of zeros (a hole). The last may be shorter.
pub(crate) struct Blocks<'a> {
    content: std::slice::Iter<'a, Content>,
    block: u64,
    /// Bytes not yet given out.
    left: u64,
    /// Zeros of the current hole not yet given out.
    zeros: u64,
}

impl<'a> Blocks<'a> {
    /// # Errors
    /// [`RepoError::Invalid`] for a block size of 0.
    pub(crate) fn new(content: &'a [Content], size: u64, block: u64) -> Result<Self> {
        if block == 0 {
            return Err(RepoError::Invalid("a block size of 0".into()));
        }
        Ok(Self {
            content: content.iter(),
            block,
            left: size,
            zeros: 0,
        })
    }

    /// How many blocks `size` bytes make.
    pub(crate) fn count(size: u64, block: u64) -> u64 {
        size.div_ceil(block.max(1))
    }
}

impl Iterator for Blocks<'_> {
    /// A block's blob or hole; [`RepoError::Corrupt`] where the content is not one of
    /// fixed blocks of this size (a hole that ends inside a block, a length that is not
    /// the size).
    type Item = Result<Option<Id>>;

    fn next(&mut self) -> Option<Self::Item> {
        let corrupt = |why: &str| Some(Err(RepoError::corrupt("block image", why)));
        if self.left == 0 {
            return (self.zeros > 0 || self.content.len() > 0)
                .then(|| corrupt("its content runs past its size"))
                .flatten();
        }
        let len = self.block.min(self.left);
        self.left -= len;
        if self.zeros == 0 {
            match self.content.next() {
                None => return corrupt("its content ends before its size"),
                Some(Content::Blob { blob }) => return Some(Ok(Some(*blob))),
                Some(Content::Zero { zero }) => self.zeros = *zero,
            }
        }
        if self.zeros < len {
            return corrupt("a hole ends inside a block");
        }
        self.zeros -= len;
        Some(Ok(None))
    }
}

/// Appends a chunk of `len` bytes to `content`: its blob, or with `None` a hole, merged
/// with a hole just before it.
pub(crate) fn push_entry(content: &mut Vec<Content>, len: u64, blob: Option<Id>) {
    match blob {
        Some(blob) => content.push(Content::Blob { blob }),
        None => match content.last_mut() {
            Some(Content::Zero { zero }) => *zero += len,
            _ => content.push(Content::Zero { zero: len }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> Id {
        Id([n; 32])
    }

    #[test]
    fn holes_split_into_blocks_and_the_last_block_may_be_short() {
        let content = [
            Content::Blob { blob: id(1) },
            Content::Zero { zero: 8 },
            Content::Blob { blob: id(2) },
            Content::Zero { zero: 3 },
        ];
        let got: Vec<Option<Id>> = Blocks::new(&content, 4 + 8 + 4 + 3, 4)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(got, vec![Some(id(1)), None, None, Some(id(2)), None]);
        assert_eq!(Blocks::count(19, 4), 5);
    }

    #[test]
    fn content_that_is_not_of_whole_blocks_is_refused() {
        let hole_inside = [Content::Zero { zero: 6 }];
        assert!(Blocks::new(&hole_inside, 8, 4).unwrap().any(|b| b.is_err()));
        let too_long = [Content::Blob { blob: id(1) }, Content::Blob { blob: id(2) }];
        assert!(Blocks::new(&too_long, 4, 4).unwrap().any(|b| b.is_err()));
        let too_short = [Content::Blob { blob: id(1) }];
        assert!(Blocks::new(&too_short, 8, 4).unwrap().any(|b| b.is_err()));
    }
}
