//! Which bucket a request's `Host` names when a virtual-host base domain is configured:
//! `BUCKET.DOMAIN` is virtual-host style, the domain itself and every other name (an IP,
//! `localhost`, a Kubernetes service name) are path style. s3s's `SingleDomain` takes any
//! other valid host name for a whole-name bucket (a CNAME), which turned a sidecar's
//! `Host: kura-gateway` path-style request into a request for bucket `kura-gateway`.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

/// The configured base domain (with its port, if clients send one).
#[derive(Clone)]
pub(crate) struct BaseDomain {
    base: String,
}

impl BaseDomain {
    /// Checks `base` as s3s checks a domain.
    pub(crate) fn new(base: &str) -> Result<Self, String> {
        s3s::host::SingleDomain::new(base).map_err(|e| e.to_string())?;
        Ok(Self {
            base: base.to_ascii_lowercase(),
        })
    }

    /// The bucket of `BUCKET.DOMAIN`, if `host` is such a name. Ports are not compared:
    /// a client may reach the gateway through another port (a Kubernetes service's) than
    /// the one configured, and must not then be taken for a path-style one.
    pub(crate) fn bucket_of<'a>(&self, host: &'a str) -> Option<&'a str> {
        let name = without_port(host);
        let base = without_port(&self.base);
        let split = name.len().checked_sub(base.len() + 1)?;
        let (bucket, rest) = (name.get(..split)?, name.get(split..)?);
        let domain = rest.strip_prefix('.')?;
        (domain.eq_ignore_ascii_case(base) && !bucket.is_empty()).then_some(bucket)
    }
}

/// A host name without its `:port`.
fn without_port(host: &str) -> &str {
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

impl S3Host for BaseDomain {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match self.bucket_of(host) {
            // Host names are case-insensitive and bucket names lower case.
            Some(bucket) => {
                VirtualHost::new(self.base.as_str()).with_bucket(bucket.to_ascii_lowercase())
            }
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_under_the_domain_carry_a_bucket() {
        let d = BaseDomain::new("s3.example.com:9000").unwrap();
        assert_eq!(d.bucket_of("velero.s3.example.com:9000"), Some("velero"));
        assert_eq!(d.bucket_of("Velero.S3.Example.com:9000"), Some("Velero"));
        assert_eq!(d.bucket_of("velero.s3.example.com"), Some("velero"));
        assert_eq!(d.bucket_of("velero.s3.example.com:80"), Some("velero"));
        for path_style in [
            "s3.example.com:9000",
            ".s3.example.com:9000",
            "localhost:9000",
            "kura-gateway",
            "10.0.0.7:9000",
            "xs3.example.com:9000",
        ] {
            assert_eq!(d.bucket_of(path_style), None, "{path_style}");
        }
        // Slicing by byte count must not split a character.
        assert_eq!(d.bucket_of("ééééééééééééééééééé"), None);
    }
}
