//! CSI SnapshotMetadata records as JSON (FORMAT.md 5.4): the lister's list of
//! `GetMetadataAllocated`/`GetMetadataDelta` responses, or one of them, read as a stream.
//! Each extent goes straight into the list of ranges as it is read: a fully allocated
//! volume of many TiB is millions of extents, and a parse into `serde_json::Value` first
//! (as before) held several hundred bytes for each of them.

use std::fmt;
use std::io::BufRead;
use std::result::Result;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Extents, ExtentsFormat, bad, num, same_capacity};
use crate::error::Result as RepoResult;

/// Reads the records in `input`.
pub(super) fn parse(input: impl BufRead) -> RepoResult<Extents> {
    let mut sink = Sink::default();
    let mut de = serde_json::Deserializer::from_reader(input);
    Top(&mut sink)
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| {
            bad(format!(
                "CSI SnapshotMetadata JSON (a list of records of block_metadata): {e}"
            ))
        })?;
    Extents::from_ranges(ExtentsFormat::CsiJson, sink.ranges, sink.capacity)
}

/// What the records said so far.
#[derive(Default)]
struct Sink {
    ranges: Vec<(u64, u64)>,
    capacity: Option<u64>,
}

/// The whole file: a list of records, or one.
struct Top<'a>(&'a mut Sink);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of SnapshotMetadata records, or one record")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Record(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        Record(self.0).visit_map(map)
    }
}

/// A record's fields, in the lister's snake_case or the protobuf mapping's camelCase; any
/// other is refused, naming it.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Field {
    // The lister leaves the type as a number (FIXED_LENGTH 1, VARIABLE_LENGTH 2); the
    // protobuf mapping spells it. Either way the extents say the same.
    #[serde(alias = "blockMetadataType")]
    BlockMetadataType,
    #[serde(alias = "volumeCapacityBytes")]
    VolumeCapacityBytes,
    #[serde(alias = "blockMetadata")]
    BlockMetadata,
}

/// One record.
struct Record<'a>(&'a mut Sink);

impl<'de> DeserializeSeed<'de> for Record<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Record<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a SnapshotMetadata record")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::BlockMetadataType => {
                    map.next_value::<IgnoredAny>()?;
                }
                // `null` is absent, as the derived reader before this one took it.
                Field::VolumeCapacityBytes => {
                    if let Some(Number(c)) = map.next_value()? {
                        same_capacity(&mut self.0.capacity, c).map_err(de::Error::custom)?;
                    }
                }
                Field::BlockMetadata => map.next_value_seed(Blocks(&mut *self.0))?,
            }
        }
        Ok(())
    }
}

/// A record's `block_metadata`: each extent pushed as it is read.
struct Blocks<'a>(&'a mut Sink);

impl<'de> DeserializeSeed<'de> for Blocks<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Blocks<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of extents (byte_offset, size_bytes)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(b) = seq.next_element::<Block>()? {
            // Go's generated structs omit zero values: the first extent has no offset.
            let o = b.byte_offset.map_or(0, |Number(n)| n);
            let Some(Number(l)) = b.size_bytes else {
                return Err(de::Error::custom(format!(
                    "the extent at {o} has no size_bytes"
                )));
            };
            self.0.ranges.push((o, l));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    #[serde(default, alias = "byteOffset")]
    byte_offset: Option<Number>,
    #[serde(default, alias = "sizeBytes")]
    size_bytes: Option<Number>,
}

/// A JSON number, or a string of one (the protobuf JSON mapping writes 64-bit integers
/// as strings; Go's encoding/json, which the lister uses, as numbers).
struct Number(u64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number, or a string of one")
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Number, E> {
                Ok(Number(n))
            }

            fn visit_str<E: de::Error>(self, t: &str) -> Result<Number, E> {
                num("the number", t).map(Number).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}
