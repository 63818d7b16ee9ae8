//! Bearer tokens (`Authorization: Bearer <token>`): how a configured token
//! must look, how one is read from a request, how two are compared, and the
//! 401 that refuses one. The admin surface and `/metrics` both use it; it
//! knows neither.

use crate::problem::Problem;
use crate::secret::Secret;
use actix_web::http::StatusCode;
use actix_web::http::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use actix_web::{HttpRequest, HttpResponse};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

/// The shortest token accepted: a guessable token guards nothing.
pub const MIN_TOKEN_LEN: usize = 16;

/// The token of an `Authorization: Bearer <token>` header (the scheme is
/// case-insensitive, as RFC 9110 says).
pub fn presented(request: &HttpRequest) -> Option<&str> {
    let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// 401 `unauthorized` with `challenge` (`Bearer realm="..."`) as its
/// `WWW-Authenticate`, saying nothing about why: missing and wrong tokens
/// look alike.
pub fn unauthorized(challenge: &'static str, detail: &'static str) -> HttpResponse {
    let mut response = Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "Unauthorized",
        detail,
    )
    .to_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

/// A configured token as it will be compared. The messages describe the
/// token, never echo it.
pub fn configured(token: &str) -> Result<Secret, String> {
    let token = token.trim();
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(format!("too short (at least {MIN_TOKEN_LEN} characters)"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) || token.contains(',') {
        return Err("only visible ASCII characters, without spaces or commas".into());
    }
    Ok(Secret::new(token.as_bytes().to_vec()))
}

/// Whether `a` and `b` are equal, in time that depends on neither their
/// contents nor where they differ. Both sides are hashed first, so the byte
/// comparison always runs over 32 bytes, and the lengths are compared too
/// (in constant time) rather than returning early when they differ, which
/// would tell an attacker the token's length.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    equal(a, b).into()
}

/// [`constant_time_eq`] as a `Choice`, to fold several comparisons together
/// without branching on any of them.
pub fn equal(a: &[u8], b: &[u8]) -> Choice {
    let same_length = (a.len() as u64).ct_eq(&(b.len() as u64));
    let same_digest = Sha256::digest(a)
        .as_slice()
        .ct_eq(Sha256::digest(b).as_slice());
    same_length & same_digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_compare_equal() {
        assert!(constant_time_eq(
            b"tok_0123456789abcdef",
            b"tok_0123456789abcdef"
        ));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn bytes_of_different_lengths_never_compare_equal() {
        assert!(!constant_time_eq(
            b"tok_0123456789abcdef",
            b"tok_0123456789abcde"
        ));
        assert!(!constant_time_eq(
            b"tok_0123456789abcdef",
            b"tok_0123456789abcdefg"
        ));
        assert!(!constant_time_eq(b"tok_0123456789abcdef", b""));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn bytes_of_the_same_length_differing_anywhere_compare_unequal() {
        let token = b"tok_0123456789abcdef";
        for i in 0..token.len() {
            let mut other = *token;
            other[i] ^= 1;
            assert!(!constant_time_eq(token, &other), "differs at {i}");
        }
    }

    #[test]
    fn a_short_spaced_or_comma_token_is_refused_without_being_echoed() {
        for bad in [
            "short-secret",
            "has a space in it, long",
            "tok_aaaaaaaa,bbbbbbbb",
        ] {
            let message = configured(bad).unwrap_err();
            assert!(!message.contains(bad), "{message}");
        }
        let token = configured("  tok_0123456789abcdef ").unwrap();
        assert_eq!(token.expose(), b"tok_0123456789abcdef");
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_others_are_ignored() {
        use actix_web::test::TestRequest;
        let request = TestRequest::default()
            .insert_header((AUTHORIZATION, "bEaReR  tok_1 "))
            .to_http_request();
        assert_eq!(presented(&request), Some("tok_1"));
        let request = TestRequest::default()
            .insert_header((AUTHORIZATION, "Basic dXNlcjpwYXNz"))
            .to_http_request();
        assert_eq!(presented(&request), None);
        assert_eq!(presented(&TestRequest::default().to_http_request()), None);
    }
}
