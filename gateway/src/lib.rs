//! The encrypting S3 gateway (issue 3); empty until then.
