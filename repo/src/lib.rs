//! The deduplicating snapshot repository (issue 5); empty until then.
