//! Client powers: the request fields that act with the gateway's upstream identity, or
//! that the upstream stores in the clear, and which credential may use each.
//!
//! The gateway signs every upstream request with its own credentials, so whatever a
//! client's request carries, the upstream grants with the gateway's rights. A compromised
//! backup client could otherwise delete versions that Object Lock protects
//! (`x-amz-bypass-governance-retention`), shorten or lift retention and legal holds, make
//! ciphertext public (`x-amz-acl`, `x-amz-grant-*`), point an object elsewhere
//! (`x-amz-website-redirect-location`), or store file names in the clear beside the
//! ciphertext (`x-amz-tagging`, `Content-Disposition`). Each is refused (403
//! `AccessDenied`, naming the power) unless the client's credential lists the power by
//! name in the config. Two exceptions:
//!
//! - the canned ACLs `private` and `bucket-owner-full-control` are what an object gets
//!   anyway; clients send them by habit (s3cmd, some rclone remotes), so they are
//!   dropped, not refused;
//! - SSE-C (`x-amz-server-side-encryption-customer-*`) is refused for everyone: the
//!   upstream would need the client's key to serve the gateway's own reads, and kura
//!   already encrypts.
//!
//! The checks run in the access step (`credentials.rs`), before any handler, so no
//! operation file has to remember them.

use std::fmt;

use s3s::dto::{BucketCannedACL, ObjectCannedACL};
use s3s::{S3Result, s3_error};

/// One power a credential may be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Power {
    /// `x-amz-bypass-governance-retention` on DeleteObject(s) and PutObjectRetention.
    BypassGovernance,
    /// PutObjectRetention.
    Retention,
    /// PutObjectLegalHold.
    LegalHold,
    /// ACLs other than `private` and `bucket-owner-full-control`, and grants, on objects
    /// and on CreateBucket.
    Acl,
    /// `x-amz-website-redirect-location`.
    WebsiteRedirect,
    /// `x-amz-tagging`, stored by the upstream in the clear.
    TagsInClear,
    /// `Content-Disposition` (which often carries a file name), stored in the clear.
    ContentDispositionInClear,
    /// PutBucketVersioning: suspending versioning lets later writes replace what a version
    /// would have kept.
    BucketVersioning,
}

/// Every power with its name in the config.
const NAMES: [(Power, &str); 8] = [
    (Power::BypassGovernance, "bypass-governance-retention"),
    (Power::Retention, "object-retention"),
    (Power::LegalHold, "legal-hold"),
    (Power::Acl, "acl"),
    (Power::WebsiteRedirect, "website-redirect"),
    (Power::TagsInClear, "tags-in-clear"),
    (
        Power::ContentDispositionInClear,
        "content-disposition-in-clear",
    ),
    (Power::BucketVersioning, "bucket-versioning"),
];

impl Power {
    /// Its name in the config.
    #[must_use]
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("?", |(_, n)| n)
    }
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The powers one credential was given; none by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Powers(Vec<Power>);

impl Powers {
    /// Powers from their config names.
    ///
    /// # Errors
    /// An unknown name, with the known ones: a misspelt power must not pass unnoticed.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        let mut powers = Vec::new();
        for name in names {
            let name = name.as_ref();
            let Some((power, _)) = NAMES.iter().find(|(_, n)| *n == name) else {
                let known: Vec<&str> = NAMES.iter().map(|(_, n)| *n).collect();
                return Err(format!(
                    "unknown power {name:?}; the powers are {}",
                    known.join(", ")
                ));
            };
            powers.push(*power);
        }
        Ok(Self(powers))
    }

    /// Whether `power` was given.
    #[must_use]
    pub fn allows(&self, power: Power) -> bool {
        self.0.contains(&power)
    }

    /// Refuses a request that uses `power` when it was not given.
    ///
    /// # Errors
    /// `AccessDenied`, naming the power and where it is given.
    pub fn require(&self, power: Power, used: bool) -> S3Result<()> {
        if used && !self.allows(power) {
            return Err(s3_error!(
                AccessDenied,
                "this request needs the power {power:?}, which this access key was not \
                 given (the credential's `powers` in the gateway config)",
                power = power.name()
            ));
        }
        Ok(())
    }

    /// Checks a canned ACL: `private` and `bucket-owner-full-control` are dropped (what
    /// the object gets anyway), any other needs [`Power::Acl`] and stays.
    ///
    /// # Errors
    /// As [`Powers::require`].
    pub fn canned_acl(&self, acl: &mut Option<ObjectCannedACL>) -> S3Result<()> {
        let default = acl.as_ref().is_some_and(|a| {
            matches!(
                a.as_str(),
                ObjectCannedACL::PRIVATE | ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL
            )
        });
        self.default_dropped(acl, default)
    }

    /// As [`Powers::canned_acl`], for CreateBucket: `private` is dropped, any other
    /// (`public-read`, `public-read-write`, `authenticated-read`) needs [`Power::Acl`].
    ///
    /// # Errors
    /// As [`Powers::require`].
    pub fn bucket_canned_acl(&self, acl: &mut Option<BucketCannedACL>) -> S3Result<()> {
        let default = acl
            .as_ref()
            .is_some_and(|a| a.as_str() == BucketCannedACL::PRIVATE);
        self.default_dropped(acl, default)
    }

    fn default_dropped<T>(&self, acl: &mut Option<T>, default: bool) -> S3Result<()> {
        if default && !self.allows(Power::Acl) {
            *acl = None;
        }
        self.require(Power::Acl, acl.is_some())
    }
}

/// Checks the fields a PUT, a copy and a CreateMultipartUpload share (each input type
/// names them alike): ACLs and grants, redirect, tags, Content-Disposition, SSE-C.
macro_rules! check_object_fields {
    ($powers:expr, $input:expr) => {{
        let powers: &$crate::powers::Powers = $powers;
        let input = $input;
        powers.canned_acl(&mut input.acl)?;
        let grants = input.grant_full_control.is_some()
            || input.grant_read.is_some()
            || input.grant_read_acp.is_some()
            || input.grant_write_acp.is_some();
        powers.require($crate::powers::Power::Acl, grants)?;
        powers.require(
            $crate::powers::Power::WebsiteRedirect,
            input.website_redirect_location.is_some(),
        )?;
        powers.require($crate::powers::Power::TagsInClear, input.tagging.is_some())?;
        powers.require(
            $crate::powers::Power::ContentDispositionInClear,
            input.content_disposition.is_some(),
        )?;
        $crate::powers::refuse_sse_c(
            input.sse_customer_algorithm.is_some()
                || input.sse_customer_key.is_some()
                || input.sse_customer_key_md5.is_some(),
        )
    }};
}
pub(crate) use check_object_fields;

/// Refuses SSE-C, for everyone.
///
/// # Errors
/// `InvalidRequest` when `used`.
pub fn refuse_sse_c(used: bool) -> S3Result<()> {
    if used {
        return Err(s3_error!(
            InvalidRequest,
            "SSE-C is not accepted through kura: the gateway encrypts every object itself, \
             and the upstream would need your key to serve its reads"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_power_parses_by_its_name_and_an_unknown_name_is_refused() {
        let names: Vec<&str> = NAMES.iter().map(|(_, n)| *n).collect();
        let all = Powers::parse(&names).unwrap();
        assert!(NAMES.iter().all(|(p, _)| all.allows(*p)));
        let err = Powers::parse(&["bypass-governance"]).unwrap_err();
        assert!(err.contains("bypass-governance-retention"), "{err}");
    }

    #[test]
    fn a_default_canned_acl_is_dropped_and_another_refused_without_the_power() {
        let none = Powers::default();
        let mut acl = Some(ObjectCannedACL::from_static(ObjectCannedACL::PRIVATE));
        none.canned_acl(&mut acl).unwrap();
        assert_eq!(acl, None);
        let mut acl = Some(ObjectCannedACL::from_static(ObjectCannedACL::PUBLIC_READ));
        assert!(none.canned_acl(&mut acl).is_err());
        let given = Powers::parse(&["acl"]).unwrap();
        given.canned_acl(&mut acl).unwrap();
        assert!(acl.is_some(), "kept for a credential with the power");
    }
}
