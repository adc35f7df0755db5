//! Entry points for the fuzz targets in `../fuzz` (not part of the gateway's API): the
//! parsers that read what a client or a config file sends, each run on arbitrary bytes.
//! Each must end in a value or an error, never a panic.

#![allow(
    clippy::missing_panics_doc,
    reason = "a panic here is what the fuzzer looks for"
)]

use futures::StreamExt as _;

use crate::chunk_guard::{ChunkGuard, Framing};

/// A request body that arrives in given pieces.
struct Pieces(std::collections::VecDeque<bytes::Bytes>);

impl futures::Stream for Pieces {
    type Item = Result<bytes::Bytes, s3s::StdError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

impl s3s::stream::ByteStream for Pieces {}

/// Runs an aws-chunked body through the chunk guard, fed in pieces of the sizes `pieces`
/// names (cycled), signed or unsigned (with a declared decoded length), and drains what it
/// lets through.
pub fn chunk_guard(body: &[u8], pieces: &[u8], unsigned: Option<Option<u64>>) {
    let mut chunks = std::collections::VecDeque::new();
    let mut rest = body;
    let sizes = if pieces.is_empty() {
        &[255u8][..]
    } else {
        pieces
    };
    for size in sizes.iter().map(|p| usize::from(*p) + 1).cycle() {
        if rest.is_empty() {
            break;
        }
        let (head, tail) = rest.split_at(size.min(rest.len()));
        chunks.push_back(bytes::Bytes::copy_from_slice(head));
        rest = tail;
    }
    let inner: s3s::stream::DynByteStream = Box::pin(Pieces(chunks));
    let framing = match unsigned {
        None => Framing::Signed,
        Some(decoded) => Framing::Unsigned { decoded },
    };
    let mut guard = ChunkGuard::new(s3s::Body::from(inner), framing);
    futures::executor::block_on(async {
        while let Some(item) = guard.next().await {
            if item.is_err() {
                break;
            }
        }
    });
}

/// Parses `xml` as each request document the gateway reads whole (s3s's parser, as the
/// gateway configures it).
pub fn xml_bodies(xml: &[u8]) {
    use s3s::dto::{
        CompletedMultipartUpload, Delete, ObjectLockLegalHold, ObjectLockRetention, Tagging,
        VersioningConfiguration,
    };
    fn parse<T: for<'x> s3s::xml::Deserialize<'x>>(xml: &[u8]) {
        let mut d = s3s::xml::Deserializer::new(xml);
        if T::deserialize(&mut d).is_ok() {
            let _ = d.expect_eof();
        }
    }
    parse::<CompletedMultipartUpload>(xml);
    parse::<Delete>(xml);
    parse::<Tagging>(xml);
    parse::<ObjectLockRetention>(xml);
    parse::<ObjectLockLegalHold>(xml);
    parse::<VersioningConfiguration>(xml);
}

/// Parses `text` as the gateway's config file; an error is described as the CLI describes
/// it, which must never quote the text.
pub fn config(text: &str) {
    if let Err(e) = toml::from_str::<crate::config::FileConfig>(text) {
        let _ = kura_keys::keyfile::describe_toml_error(&e, text);
    }
}
