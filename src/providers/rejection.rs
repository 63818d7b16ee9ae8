/// Why a delivery was refused before anything was stored. Each cause has its
/// own problem `type`, so a sender can tell a bad secret from a clock skew.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the {header} header is malformed: {reason}")]
    MalformedHeader {
        header: &'static str,
        reason: &'static str,
    },
    #[error("no signature matches any configured secret")]
    InvalidSignature,
    #[error("the timestamp is more than {tolerance_secs} s away from the receiver's clock")]
    StaleTimestamp { tolerance_secs: u64 },
    #[error("the body is not valid JSON")]
    MalformedBody,
    #[error("the delivery id is invalid: {0}")]
    InvalidKey(&'static str),
    /// The key lives in the body and is not there.
    #[error("the body has no delivery id at {0}")]
    MissingKey(&'static str),
    /// A signed value that lives in the body, the form or the query.
    #[error("the request has no {0}")]
    MissingField(&'static str),
    #[error("{field} is malformed: {reason}")]
    MalformedField {
        field: &'static str,
        reason: &'static str,
    },
    /// The certificate that signed the delivery (PayPal) is not one to trust.
    #[error("the signing certificate is refused: {0}")]
    UntrustedCertificate(&'static str),
    /// The signing certificate (PayPal) could not be fetched; the sender
    /// should try again later.
    #[error("the signing certificate could not be fetched")]
    CertificateUnavailable,
}
