//! Cross-site request forgery on the page's forms (log in, log out, and
//! every action: reprocess, the queue's and the outbox's).
//!
//! Browsers say where a POST comes from: `Sec-Fetch-Site` (every current
//! browser) and `Origin` (on every POST since 2020). A POST is refused when
//! either says it was not made by a page of this very origin. `same-site`
//! is refused too: a sibling subdomain, or another port of the same host,
//! is another application, and the admin page has no reason to trust its
//! forms.
//!
//! A request with neither header is let through: it does not come from a
//! browser (curl, a script), and forgery needs a victim's browser to carry
//! the victim's ambient credentials. The session cookie is also
//! `SameSite=Strict`, so a forged request would not carry it anyway.

use actix_web::HttpRequest;

const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// Why a POST was refused as cross-site; the detail of the 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CrossSite {
    #[error("the request's Sec-Fetch-Site is not same-origin")]
    FetchSite,
    #[error("the request's Origin is not this server's")]
    Origin,
}

/// Whether `request` may be a form of this page, as described above.
pub fn same_origin(request: &HttpRequest) -> Result<(), CrossSite> {
    let headers = request.headers();
    let fetch_site = headers.get(SEC_FETCH_SITE);
    if let Some(site) = fetch_site {
        // `none`: the user's own navigation (typed, a bookmark).
        let allowed = site
            .to_str()
            .is_ok_and(|site| site.eq_ignore_ascii_case("same-origin") || site == "none");
        if !allowed {
            return Err(CrossSite::FetchSite);
        }
    }
    if let Some(origin) = headers.get(actix_web::http::header::ORIGIN) {
        // A browser hides even a same-origin post's origin as `null` under
        // `Referrer-Policy: no-referrer`, which this page sets; then the
        // `Sec-Fetch-Site: same-origin` checked above vouches for it.
        if origin == "null" && fetch_site.is_some() {
            return Ok(());
        }
        let info = request.connection_info();
        let own = normalise(info.scheme(), info.host());
        // Otherwise `Origin: null` (a sandboxed frame, a cross-origin
        // redirect, an old browser) never matches.
        let matches = origin
            .to_str()
            .ok()
            .and_then(|origin| origin.split_once("://"))
            .is_some_and(|(scheme, host)| normalise(scheme, host) == own);
        if !matches {
            return Err(CrossSite::Origin);
        }
    }
    Ok(())
}

/// `scheme://host[:port]` in lower case, without the scheme's default port,
/// as browsers serialise an origin.
fn normalise(scheme: &str, host: &str) -> String {
    let scheme = scheme.to_ascii_lowercase();
    let host = host.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => ":80",
        "https" => ":443",
        _ => "",
    };
    let host = match host.strip_suffix(default_port) {
        Some(bare) if !default_port.is_empty() => bare.to_owned(),
        _ => host,
    };
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn post(headers: &[(&str, &str)]) -> Result<(), CrossSite> {
        let mut request = TestRequest::post()
            .uri("/admin/login")
            .insert_header(("host", "admin.example:8080"));
        for header in headers {
            request = request.insert_header(*header);
        }
        same_origin(&request.to_http_request())
    }

    #[test]
    fn a_same_origin_post_passes_and_one_without_either_header_too() {
        assert_eq!(post(&[("origin", "http://admin.example:8080")]), Ok(()));
        assert_eq!(post(&[("origin", "HTTP://Admin.Example:8080")]), Ok(()));
        assert_eq!(
            post(&[
                ("origin", "http://admin.example:8080"),
                ("sec-fetch-site", "same-origin")
            ]),
            Ok(())
        );
        assert_eq!(post(&[("sec-fetch-site", "none")]), Ok(()));
        assert_eq!(post(&[]), Ok(()));
        // What Chromium sends for this page's own forms (no-referrer).
        assert_eq!(
            post(&[("origin", "null"), ("sec-fetch-site", "same-origin")]),
            Ok(())
        );
        assert_eq!(
            post(&[("origin", "null"), ("sec-fetch-site", "cross-site")]),
            Err(CrossSite::FetchSite)
        );
    }

    #[test]
    fn another_site_port_scheme_or_a_null_origin_is_refused() {
        for origin in [
            "http://evil.example",
            "http://admin.example:8081",
            "https://admin.example:8080",
            "http://admin.example",
            "http://admin.example:8080.evil.example",
            "null",
            "",
        ] {
            assert_eq!(
                post(&[("origin", origin)]),
                Err(CrossSite::Origin),
                "{origin}"
            );
        }
    }

    #[test]
    fn sec_fetch_site_other_than_same_origin_is_refused_whatever_the_origin_says() {
        for site in ["cross-site", "same-site", "garbage"] {
            assert_eq!(
                post(&[
                    ("sec-fetch-site", site),
                    ("origin", "http://admin.example:8080")
                ]),
                Err(CrossSite::FetchSite),
                "{site}"
            );
        }
    }

    #[test]
    fn default_ports_are_the_same_origin_as_none() {
        assert_eq!(normalise("http", "h:80"), normalise("http", "h"));
        assert_eq!(normalise("https", "h:443"), normalise("https", "h"));
        assert_ne!(normalise("http", "h:443"), normalise("http", "h"));
    }
}
