//! A signing certificate, reduced to what verification needs: the RSA key,
//! the validity period and nothing else.

use rsa::RsaPublicKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey;
use rsa::sha2::Sha256;
use rsa::signature::Verifier;
use rsa::traits::PublicKeyParts;
use x509_parser::pem::parse_x509_pem;

/// The largest certificate accepted, pinned or fetched (PayPal's is 2.7 KB).
pub const MAX_PEM_BYTES: usize = 64 * 1024;
/// Keys below this are refused: PayPal's is 2048 bits, and a shorter one is
/// factorable by a patient attacker.
const MIN_KEY_BITS: usize = 2048;
/// What the subject CN must end with. PayPal-Python-SDK's
/// `WebhookEvent._is_common_name_valid` (paypalrestsdk/notifications.py)
/// accepts exactly the certificates whose CN, lowercased, ends with this.
const CN_SUFFIX: &str = ".paypal.com";

#[derive(Debug)]
pub struct Certificate {
    key: VerifyingKey<Sha256>,
    /// The key's modulus length in bytes, which is every valid signature's.
    signature_len: usize,
    /// Unix seconds, inclusive at both ends as in RFC 5280.
    not_before: i64,
    not_after: i64,
}

impl Certificate {
    /// Parses one PEM certificate. The reasons are fixed strings: a fetched
    /// certificate is attacker-influenced text and is never echoed.
    pub fn from_pem(pem: &[u8]) -> Result<Certificate, &'static str> {
        if pem.len() > MAX_PEM_BYTES {
            return Err("it is larger than 64 KiB");
        }
        let (_, pem) = parse_x509_pem(pem).map_err(|_| "it is not a PEM certificate")?;
        if pem.label != "CERTIFICATE" {
            return Err("its PEM block is not a CERTIFICATE");
        }
        let cert = pem
            .parse_x509()
            .map_err(|_| "it is not a valid X.509 certificate")?;
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .ok_or("its subject has no common name")?;
        if !common_name.to_ascii_lowercase().ends_with(CN_SUFFIX) {
            return Err("its subject common name does not end with .paypal.com");
        }
        let public_key = RsaPublicKey::from_public_key_der(cert.public_key().raw)
            .map_err(|_| "its key is not an RSA key of at most 4096 bits")?;
        let signature_len = public_key.size();
        if signature_len * 8 < MIN_KEY_BITS {
            return Err("its RSA key is shorter than 2048 bits");
        }
        let validity = cert.validity();
        Ok(Certificate {
            key: VerifyingKey::new(public_key),
            signature_len,
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
        })
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 (`SHA256withRSA`). A signature of any
    /// other length than the modulus fails.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        if signature.len() != self.signature_len {
            return false;
        }
        Signature::try_from(signature)
            .is_ok_and(|signature| self.key.verify(message, &signature).is_ok())
    }

    /// Whether the certificate was valid at `timestamp` (Unix seconds).
    pub fn valid_at(&self, timestamp: i64) -> bool {
        (self.not_before..=self.not_after).contains(&timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_CERT: &[u8] = include_bytes!("../../../tests/data/paypal/test-cert.pem");
    const OTHER_CN: &[u8] = include_bytes!("../../../tests/data/paypal/test-cert-other-cn.pem");
    const SANDBOX_2015: &[u8] = include_bytes!("../../../tests/data/paypal/sandbox-2015-cert.pem");
    const TEST_KEY: &[u8] = include_bytes!("../../../tests/data/paypal/test-key.pem");

    #[test]
    fn the_validity_period_is_read_from_the_certificate() {
        // `openssl x509 -noout -dates -in tests/data/paypal/test-cert.pem`:
        // 2020-01-01T00:00:00Z to 2040-01-01T00:00:00Z.
        let cert = Certificate::from_pem(TEST_CERT).unwrap();
        assert_eq!(
            (cert.not_before, cert.not_after),
            (1_577_836_800, 2_208_988_800)
        );
        assert!(cert.valid_at(1_577_836_800) && cert.valid_at(2_208_988_800));
        assert!(!cert.valid_at(1_577_836_799) && !cert.valid_at(2_208_988_801));
    }

    #[test]
    fn paypal_s_2015_sandbox_certificate_parses() {
        // Mar 18 00:00:00 2015 GMT to Mar 22 12:00:00 2017 GMT.
        let cert = Certificate::from_pem(SANDBOX_2015).unwrap();
        assert_eq!(
            (cert.not_before, cert.not_after),
            (1_426_636_800, 1_490_184_000)
        );
        assert_eq!(cert.signature_len, 256);
    }

    #[test]
    fn a_common_name_outside_paypal_com_is_refused() {
        assert_eq!(
            Certificate::from_pem(OTHER_CN).unwrap_err(),
            "its subject common name does not end with .paypal.com"
        );
    }

    #[test]
    fn what_is_not_one_certificate_is_refused() {
        assert!(Certificate::from_pem(b"").is_err());
        assert!(Certificate::from_pem(b"not a certificate").is_err());
        assert_eq!(
            Certificate::from_pem(TEST_KEY).unwrap_err(),
            "its PEM block is not a CERTIFICATE"
        );
        let mut truncated = TEST_CERT[..600].to_vec();
        truncated.extend_from_slice(b"\n-----END CERTIFICATE-----\n");
        assert!(Certificate::from_pem(&truncated).is_err());
        let mut huge = TEST_CERT.to_vec();
        huge.resize(MAX_PEM_BYTES + 1, b'\n');
        assert_eq!(
            Certificate::from_pem(&huge).unwrap_err(),
            "it is larger than 64 KiB"
        );
    }
}
