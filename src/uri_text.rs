//! Text in URIs: the characters RFC 3986 calls unreserved, which a URI
//! never needs to percent-encode and which decoding leaves as they are.

/// Whether `byte` is unreserved: an ASCII letter or digit, `-`, `.`, `_`
/// or `~`.
pub fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}
