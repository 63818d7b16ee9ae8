//! Decimal digits written into a caller's buffer, for text built on a hot
//! path without `format!`'s allocation and formatting machinery.

/// Writes `n` in decimal so that its last digit lands just before `end`,
/// with leading zeros up to `at_least` digits (`5` with 2 is `05`), and
/// returns where its first digit is. `text` must have room: 20 bytes
/// before `end` hold any `u64`.
pub fn write_before(mut n: u64, at_least: usize, text: &mut [u8], end: usize) -> usize {
    let mut start = end;
    loop {
        start -= 1;
        text[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 && end - start >= at_least {
            return start;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::write_before;

    #[test]
    fn writes_what_display_writes_padded_to_the_width_asked() {
        for n in [0, 7, 10, 99, 100, 12_345, u64::MAX] {
            let mut text = [0; 24];
            let start = write_before(n, 1, &mut text, 22);
            assert_eq!(&text[start..22], n.to_string().as_bytes());
            assert_eq!(text[22..], [0, 0], "nothing after end");
        }
        let mut text = [0; 4];
        assert_eq!(write_before(5, 3, &mut text, 4), 1);
        assert_eq!(&text[1..], b"005");
        assert_eq!(write_before(0, 0, &mut text, 4), 3, "0 is one digit");
    }
}
