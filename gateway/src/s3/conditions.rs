//! The If-* conditions of a read (GetObject, HeadObject) or of a copy's source, checked
//! against the ETag and Last-Modified the client knows the object by.

use s3s::dto::{ETagCondition, Timestamp};
use s3s::{S3Error, S3Result, s3_error};

use crate::etag;
use crate::gateway::Located;

/// The If-* headers of a read.
#[allow(
    clippy::struct_field_names,
    reason = "named after the S3 headers If-Match and so on"
)]
pub(super) struct Conditions {
    pub(super) if_match: Option<ETagCondition>,
    pub(super) if_none_match: Option<ETagCondition>,
    pub(super) if_modified_since: Option<Timestamp>,
    pub(super) if_unmodified_since: Option<Timestamp>,
}

fn not_modified(client_etag: &str) -> S3Error {
    let mut e = s3_error!(NotModified);
    let mut h = http::HeaderMap::new();
    if let Ok(v) = format!("\"{client_etag}\"").parse() {
        h.insert(http::header::ETAG, v);
    }
    e.set_headers(h);
    e
}

impl Conditions {
    /// Evaluates the conditions in the order RFC 9110 section 13.2.2 gives them.
    pub(super) fn check(
        &self,
        client_etag: &str,
        last_modified: Option<&Timestamp>,
    ) -> S3Result<()> {
        // Clients see Last-Modified as an HTTP date, in whole seconds, and send those back;
        // a store that keeps finer times (the embedded one) must compare what they saw.
        let modified = last_modified.map(|t| {
            let t = time::OffsetDateTime::from(t.clone());
            t.replace_nanosecond(0).unwrap_or(t)
        });
        let at = |t: &Timestamp| time::OffsetDateTime::from(t.clone());
        if let Some(c) = &self.if_match {
            if !etag::condition_matches(c, client_etag) {
                return Err(s3_error!(
                    PreconditionFailed,
                    "At least one of the pre-conditions you specified did not hold"
                ));
            }
        } else if let (Some(since), Some(m)) = (&self.if_unmodified_since, modified)
            && m > at(since)
        {
            return Err(s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ));
        }
        if let Some(c) = &self.if_none_match {
            if etag::condition_matches(c, client_etag) {
                return Err(not_modified(client_etag));
            }
        } else if let (Some(since), Some(m)) = (&self.if_modified_since, modified)
            && m <= at(since)
        {
            return Err(not_modified(client_etag));
        }
        Ok(())
    }
}

/// The ETag clients know a located object by.
pub(super) fn client_etag_of(located: &Located) -> String {
    located
        .upstream_etag
        .as_deref()
        .map(etag::to_client_value)
        .unwrap_or_default()
}
