//! Digests as lowercase hex, the form every fingerprint and body hash is
//! stored and compared in.
//!
//! `hex::encode` builds its string a `char` at a time through an iterator:
//! about 2,000 instructions for a SHA-256, as much as the rest of a
//! replay's cache lookup. Encoding into a buffer of the known length is a
//! tenth of that, with the same text.

use sha2::{Digest, Sha256};

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut text = vec![0; bytes.len() * 2];
    // Neither fails: the buffer is exactly twice the input, and hex digits
    // are ASCII.
    if hex::encode_to_slice(bytes, &mut text).is_err() {
        return hex::encode(bytes);
    }
    String::from_utf8(text).unwrap_or_else(|_| hex::encode(bytes))
}

/// The SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_hex_encode_s() {
        for bytes in [&b""[..], b"\x00", b"\xff\x10\xab", b"any body at all"] {
            assert_eq!(hex(bytes), hex::encode(bytes));
        }
        // FIPS 180-2's example: SHA-256 of "abc".
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
