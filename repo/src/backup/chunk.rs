//! Chunking: content-defined chunks of files and streams (FastCDC, `cdc.rs`), and the
//! hashing and compressing of those and of the fixed blocks of devices and images
//! (`block.rs` reads them); all-zero chunks of either become holes. Chunks are hashed, and the new
//! ones compressed, in batches on every core (`par_map`) before the packer takes them.

use std::io::Read;
use std::path::Path;

use super::packer::Packer;
use crate::blob::{self, BlobType};
pub(super) use crate::blocks::push_entry;
use crate::error::{RepoError, Result};
use crate::id::Id;
use crate::storage::Storage;
use crate::tree::Content;

/// Bytes of chunks below which a batch is hashed and compressed on the reading thread.
pub const PARALLEL_MIN: usize = 1 << 20;

/// Cuts input into chunks and hands them to the packer; its buffers are reused from one
/// file to the next.
pub(super) struct Chunker {
    /// One zstd context per core, for batches hashed and compressed in parallel.
    workers: Vec<blob::Compressors>,
    /// The chunker's window, reused for every file: four times the largest chunk.
    cdc_buf: Vec<u8>,
}

impl Chunker {
    /// A chunker with a zstd context per core.
    pub(super) fn new() -> Result<Self> {
        Ok(Self {
            workers: (0..std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
                .map(|_| blob::Compressors::new())
                .collect::<Result<_>>()?,
            cdc_buf: Vec::new(),
        })
    }

    /// Content-defined chunks of a stream. The window holds four times the largest chunk: a
    /// cut is final once `max` bytes follow its start (or the input ended), so chunks are
    /// cut in place and only the unfinished tail moves, once per refill.
    ///
    /// `size_hint` (a file's length) keeps the window small for small files: a tree of
    /// small files then never touches the full window's pages. The window grows to its
    /// full size as soon as the input turns out longer.
    ///
    /// `read` is told each time a window's bytes are done (the packer then holds their
    /// chunks).
    pub(super) fn cdc<S: Storage>(
        &mut self,
        packer: &mut Packer<S>,
        mut reader: impl Read,
        size_hint: Option<u64>,
        read: &mut impl FnMut(&Packer<S>, u64),
    ) -> Result<(Vec<Content>, u64)> {
        let c = packer.repo().config.params.chunker;
        let max = c.max as usize;
        let window = 4 * max;
        let mut buf = std::mem::take(&mut self.cdc_buf);
        let first = size_hint
            .and_then(|n| usize::try_from(n).ok())
            .map_or(window, |n| (n + 1).clamp(64 << 10, window));
        if buf.len() < first {
            buf.resize(first, 0);
        }
        let mut content = Vec::new();
        let (mut len, mut size, mut eof) = (0usize, 0u64, false);
        let result = loop {
            if !eof && len == buf.len() && buf.len() < window {
                buf.resize(window, 0);
            }
            while !eof && len < buf.len() {
                match reader.read(&mut buf[len..]) {
                    Ok(0) => eof = true,
                    Ok(n) => len += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(RepoError::io(Path::new("input"), e)),
                }
            }
            let mut start = 0;
            let mut ranges = Vec::new();
            for (offset, length) in crate::cdc::chunks(&buf[..len], c) {
                if !eof && len - offset < max {
                    break;
                }
                ranges.push((offset, length));
                start = offset + length;
            }
            if let Err(e) = self.cdc_chunks(packer, &buf, &ranges, &mut content) {
                self.cdc_buf = buf;
                return Err(e);
            }
            size += start as u64;
            read(packer, start as u64);
            buf.copy_within(start..len, 0);
            len -= start;
            if eof && len == 0 {
                break Ok((content, size));
            }
        };
        self.cdc_buf = buf;
        result
    }

    /// Stores the content-defined chunks `ranges` of `buf` and appends their entries to
    /// `content`: all-zero chunks as holes (a sparse file's holes, a preallocated file's
    /// zeros), merged with a hole before them, the others as blobs. Checking costs next to
    /// nothing on data, where the first bytes are rarely all zero.
    fn cdc_chunks<S: Storage>(
        &mut self,
        packer: &mut Packer<S>,
        buf: &[u8],
        ranges: &[(usize, usize)],
        content: &mut Vec<Content>,
    ) -> Result<()> {
        let zero: Vec<bool> = ranges
            .iter()
            .map(|&(o, l)| buf[o..o + l].iter().all(|&b| b == 0))
            .collect();
        let data: Vec<(usize, usize)> = ranges
            .iter()
            .zip(&zero)
            .filter(|(_, z)| !**z)
            .map(|(r, _)| *r)
            .collect();
        let mut ids = self.data_chunks(packer, buf, &data)?.into_iter();
        for (&(_, len), is_zero) in ranges.iter().zip(zero) {
            let blob = (!is_zero).then(|| ids.next().expect("one ID per data chunk"));
            push_entry(content, len as u64, blob);
        }
        Ok(())
    }

    /// Data chunks `buf[offset..offset + len]`, in order. A batch of at least
    /// `PARALLEL_MIN` bytes is hashed, then compressed, on every core; smaller ones (small
    /// files) go one by one, without the threads and zstd contexts that would cost more.
    pub(super) fn data_chunks<S: Storage>(
        &mut self,
        packer: &mut Packer<S>,
        buf: &[u8],
        ranges: &[(usize, usize)],
    ) -> Result<Vec<Id>> {
        packer.still_wanted()?;
        let total: usize = ranges.iter().map(|r| r.1).sum();
        if ranges.len() < 2 || total < PARALLEL_MIN {
            return ranges
                .iter()
                .map(|&(o, l)| packer.save_blob(BlobType::Data, &buf[o..o + l]))
                .collect();
        }
        let key = &packer.repo().config.id_key;
        let ids: Vec<Id> = par_map(ranges, &mut self.workers, |_, &(o, l)| {
            key.id(&buf[o..o + l])
        });
        let fresh: Vec<usize> = (0..ids.len()).filter(|&i| packer.is_new(&ids[i])).collect();
        let compressed = par_map(&fresh, &mut self.workers, |z, &i| {
            let (o, l) = ranges[i];
            z.compress(BlobType::Data, &buf[o..o + l])
        });
        for (&i, c) in fresh.iter().zip(compressed) {
            let (o, l) = ranges[i];
            packer.add_stored(BlobType::Data, ids[i], &buf[o..o + l], c)?;
        }
        Ok(ids)
    }
}

/// `f` over `items` on one scoped thread per state (contiguous shares), results in order.
fn par_map<T: Sync, S: Send, R: Send>(
    items: &[T],
    states: &mut [S],
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let share = items.len().div_ceil(states.len().max(1)).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(share)
            .zip(states.iter_mut())
            .map(|(part, state)| {
                let f = &f;
                scope.spawn(move || part.iter().map(|t| f(state, t)).collect::<Vec<R>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a hashing thread panicked"))
            .collect()
    })
}
