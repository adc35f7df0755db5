//! The aws-chunked guard in front of s3s: any framing, cut into any pieces, signed or
//! unsigned, ends in bytes passed or an error, never a panic or an unbounded buffer.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, u64, &[u8], &[u8])| {
    let (mode, decoded, pieces, body) = input;
    let unsigned = match mode % 3 {
        0 => None,
        1 => Some(None),
        _ => Some(Some(decoded)),
    };
    kura_gateway::fuzzing::chunk_guard(body, pieces, unsigned);
});
