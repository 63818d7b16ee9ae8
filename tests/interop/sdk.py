"""The providers' official Python SDKs, driven by tests/api/sdk_interop.rs.

Reads one JSON request on stdin and writes one JSON answer on stdout:

  {"op": "verify", "provider", "secret", "headers": [[name, value]], "body",
   "query", "url", "now", "tolerance"}  ->  {"ok": true|false, "why": "..."}
  {"op": "sign", "provider", "secret", "id", "timestamp", "body", "url",
   "variant"}
                                        ->  {"headers", "body", "query"}

A verify answers ok=false only when the SDK itself refuses the request (its
own exception or a False); anything else (an import error, a KeyError on a
body the SDK cannot read) exits non-zero, so a crash never passes for a
refused tampered copy. The versions are pinned in .ci/requirements-interop.txt.
"""

import contextlib
import json
import sys
import urllib.parse
from datetime import datetime, timezone


def header(req, name):
    """The request's header `name` (case-insensitive), or None."""
    for key, value in req["headers"]:
        if key.lower() == name.lower():
            return value
    return None


def headers_dict(req):
    return {key.lower(): value for key, value in req["headers"]}


class Refused(Exception):
    """The SDK refused the request; the message says how."""


# --- Stripe: stripe-python, stripe/_webhook.py ---------------------------


def stripe_verify(req):
    import stripe

    try:
        stripe.Webhook.construct_event(
            req["body"], header(req, "stripe-signature"), req["secret"], req["tolerance"]
        )
    except stripe.SignatureVerificationError as e:
        raise Refused(str(e))


def stripe_sign(req):
    import stripe

    value = stripe.WebhookSignature.generate_signature_header(
        req["body"], req["secret"], req["timestamp"]
    )
    return {"headers": [["Stripe-Signature", value]]}


# --- Standard Webhooks (standardwebhooks) and Svix (svix) -----------------


def standard_verify(req):
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError

    try:
        Webhook(req["secret"]).verify(req["body"], headers_dict(req))
    except WebhookVerificationError as e:
        raise Refused(str(e))


def standard_sign(req, prefix="webhook"):
    from standardwebhooks.webhooks import Webhook

    at = datetime.fromtimestamp(req["timestamp"], tz=timezone.utc)
    signature = Webhook(req["secret"]).sign(req["id"], at, req["body"])
    return {
        "headers": [
            [f"{prefix}-id", req["id"]],
            [f"{prefix}-timestamp", str(req["timestamp"])],
            [f"{prefix}-signature", signature],
        ]
    }


def svix_verify(req):
    from svix.webhooks import Webhook, WebhookVerificationError

    try:
        Webhook(req["secret"]).verify(req["body"], headers_dict(req))
    except WebhookVerificationError as e:
        raise Refused(str(e))


def svix_sign(req):
    from svix.webhooks import Webhook

    at = datetime.fromtimestamp(req["timestamp"], tz=timezone.utc)
    signature = Webhook(req["secret"]).sign(req["id"], at, req["body"])
    return {
        "headers": [
            ["svix-id", req["id"]],
            ["svix-timestamp", str(req["timestamp"])],
            ["svix-signature", signature],
        ]
    }


# --- Slack: slack_sdk.signature.SignatureVerifier (its clock is injected) --


def slack_verify(req):
    from slack_sdk.signature import Clock, SignatureVerifier

    class At(Clock):
        def now(self):
            return float(req["now"])

    if not SignatureVerifier(req["secret"], clock=At()).is_valid_request(
        req["body"], headers_dict(req)
    ):
        raise Refused("is_valid_request: False")


def slack_sign(req):
    from slack_sdk.signature import SignatureVerifier

    timestamp = str(req["timestamp"])
    signature = SignatureVerifier(req["secret"]).generate_signature(
        timestamp=timestamp, body=req["body"]
    )
    return {
        "headers": [
            ["X-Slack-Request-Timestamp", timestamp],
            ["X-Slack-Signature", signature],
        ]
    }


# --- Paddle Billing: paddle-python-sdk, Notifications/Verifier.py ---------


def paddle_verify(req):
    from paddle_billing.Notifications import Secret, Verifier

    class Request:
        body = req["body"].encode()
        # The Verifier reads request.headers.get("Paddle-Signature").
        headers = {"Paddle-Signature": header(req, "paddle-signature")}

    # maximum_variance: the SDK's clock is the wall clock; the test signs at
    # the current time and allows for the interpreter's start-up.
    if not Verifier(maximum_variance=req["tolerance"]).verify(Request(), Secret(req["secret"])):
        raise Refused("Verifier.verify: False")


def paddle_sign(req):
    # The SDK has no header builder (only for tests in its own suite); its
    # PaddleSignature.calculate_hmac computes h1, the driver writes the header.
    from paddle_billing.Notifications.PaddleSignature import PaddleSignature

    h1 = PaddleSignature.calculate_hmac(
        req["secret"], f"{req['timestamp']}:{req['body']}".encode()
    ).hexdigest()
    return {"headers": [["Paddle-Signature", f"ts={req['timestamp']};h1={h1}"]]}


# --- Square: squareup, square/utils/webhooks_helper.py (verify only) ------


def square_verify(req):
    from square.utils.webhooks_helper import verify_signature

    if not verify_signature(
        request_body=req["body"],
        signature_header=header(req, "x-square-hmacsha256-signature") or "",
        signature_key=req["secret"],
        notification_url=req["url"],
    ):
        raise Refused("verify_signature: False")


# --- Adyen: Adyen, Adyen/util.py -----------------------------------------


def adyen_verify(req):
    from Adyen.util import is_valid_hmac_notification

    # is_valid_hmac_notification checks the first item of a batch only; the
    # receiver checks every item, so the driver asks the SDK about each.
    items = json.loads(req["body"])["notificationItems"]
    for item in items:
        if not is_valid_hmac_notification(item["NotificationRequestItem"], req["secret"]):
            raise Refused("is_valid_hmac_notification: False")


def adyen_sign(req):
    from Adyen.util import generate_notification_sig

    body = json.loads(req["body"])
    for item in body["notificationItems"]:
        fields = item["NotificationRequestItem"]
        unsigned = {k: v for k, v in fields.items() if k != "additionalData"}
        signature = generate_notification_sig(unsigned, req["secret"]).decode()
        fields.setdefault("additionalData", {})["hmacSignature"] = signature
    return {"headers": [], "body": json.dumps(body)}


# --- Razorpay: razorpay, razorpay/utility/utility.py (verify only) --------


def razorpay_verify(req):
    import razorpay
    from razorpay.errors import SignatureVerificationError

    try:
        razorpay.Utility().verify_webhook_signature(
            req["body"], header(req, "x-razorpay-signature") or "", req["secret"]
        )
    except SignatureVerificationError as e:
        raise Refused(str(e))


# --- GoCardless: gocardless_pro, gocardless_pro/webhooks.py (verify only) -


def gocardless_verify(req):
    from gocardless_pro import webhooks
    from gocardless_pro.errors import InvalidSignatureError

    try:
        webhooks.parse(req["body"], req["secret"], header(req, "webhook-signature") or "")
    except InvalidSignatureError as e:
        raise Refused(f"InvalidSignatureError {e}")


# --- Braintree: braintree, webhook_notification_gateway / webhook_testing -


def braintree_gateway(secret):
    import braintree

    public_key, private_key = secret.split(":", 1)
    return braintree.BraintreeGateway(
        braintree.Configuration(
            environment=braintree.Environment.Sandbox,
            merchant_id="interop_merchant",
            public_key=public_key,
            private_key=private_key,
        )
    )


def braintree_verify(req):
    from braintree.exceptions.invalid_signature_error import InvalidSignatureError

    form = dict(urllib.parse.parse_qsl(req["body"], keep_blank_values=True))
    try:
        braintree_gateway(req["secret"]).webhook_notification.parse(
            form.get("bt_signature"), form.get("bt_payload")
        )
    except InvalidSignatureError as e:
        raise Refused(f"InvalidSignatureError {e}")


def braintree_sign(req):
    from braintree.webhook_notification import WebhookNotification

    sample = braintree_gateway(req["secret"]).webhook_testing.sample_notification(
        WebhookNotification.Kind.SubscriptionChargedSuccessfully, req["id"]
    )
    form = urllib.parse.urlencode(
        {"bt_signature": sample["bt_signature"], "bt_payload": sample["bt_payload"]}
    )
    return {
        "headers": [["content-type", "application/x-www-form-urlencoded"]],
        "body": form,
    }


# --- Mercado Pago: mercadopago, mercadopago/webhook/validator.py ----------


def mercadopago_verify(req):
    from mercadopago.webhook.validator import (
        InvalidWebhookSignatureError,
        WebhookSignatureValidator,
    )

    query = dict(urllib.parse.parse_qsl(req["query"]))
    try:
        WebhookSignatureValidator.validate(
            header(req, "x-signature"),
            header(req, "x-request-id"),
            query.get("data.id"),
            req["secret"],
            tolerance_seconds=req["tolerance"],
            now=lambda: req["now"] * 1000,
        )
    except InvalidWebhookSignatureError as e:
        raise Refused(str(e))


# --- Twilio: twilio, twilio/request_validator.py -------------------------


class Params(dict):
    """Form parameters with repeated names, read as the SDK reads Django's
    QueryDict (getlist)."""

    def getlist(self, name):
        return self[name]


def form_params(body):
    params = Params()
    for name, value in urllib.parse.parse_qsl(body, keep_blank_values=True):
        params.setdefault(name, []).append(value)
    return params


def is_json(body):
    try:
        json.loads(body)
        return True
    except ValueError:
        return False


def twilio_verify(req):
    from twilio.request_validator import RequestValidator

    url = req["url"] + ("?" + req["query"] if req["query"] else "")
    # A JSON body is signed through bodySHA256 in the URL: the SDK takes it
    # as a string; a form as its parameters.
    params = req["body"] if is_json(req["body"]) else form_params(req["body"])
    signature = header(req, "x-twilio-signature") or ""
    if not RequestValidator(req["secret"]).validate(url, params, signature):
        raise Refused("RequestValidator.validate: False")


def twilio_sign(req):
    from twilio.request_validator import RequestValidator

    validator = RequestValidator(req["secret"])
    if is_json(req["body"]):
        query = urllib.parse.urlencode({"bodySHA256": validator.compute_hash(req["body"])})
        signature = validator.compute_signature(req["url"] + "?" + query, {})
        content_type = "application/json"
    else:
        query = ""
        signature = validator.compute_signature(req["url"], form_params(req["body"]))
        content_type = "application/x-www-form-urlencoded"
    return {
        "headers": [["X-Twilio-Signature", signature], ["content-type", content_type]],
        "query": query,
    }


# --- HubSpot: hubspot-api-client, hubspot/utils/signature.py -------------


def hubspot_verify(req):
    from hubspot.exceptions import InvalidSignatureTimestampError
    from hubspot.utils.signature import Signature

    v3 = header(req, "x-hubspot-signature-v3")
    if v3 is not None:
        version, signature = "v3", v3
    else:
        version = header(req, "x-hubspot-signature-version") or ""
        signature = header(req, "x-hubspot-signature") or ""
    try:
        valid = Signature.is_valid(
            signature=signature,
            client_secret=req["secret"],
            request_body=req["body"],
            http_uri=req["url"],
            http_method="POST",
            signature_version=version,
            timestamp=header(req, "x-hubspot-request-timestamp"),
        )
    except InvalidSignatureTimestampError as e:
        raise Refused(str(e))
    if not valid:
        raise Refused(f"Signature.is_valid ({version}): False")


def hubspot_sign(req):
    from hubspot.utils.signature import Signature

    version = req.get("variant") or "v3"
    timestamp = str(req["timestamp"] * 1000)
    signature = Signature.get_signature(
        req["secret"], req["body"], version, req["url"], "POST", timestamp
    )
    if version == "v3":
        headers = [
            ["X-HubSpot-Signature-v3", signature],
            ["X-HubSpot-Request-Timestamp", timestamp],
        ]
    else:
        headers = [["X-HubSpot-Signature", signature], ["X-HubSpot-Signature-Version", version]]
    return {"headers": headers}


# --- Coinbase Commerce: coinbase-commerce, coinbase_commerce/webhook.py --


def coinbase_verify(req):
    from coinbase_commerce.error import SignatureVerificationError
    from coinbase_commerce.webhook import Webhook

    try:
        Webhook.construct_event(req["body"], header(req, "x-cc-webhook-signature"), req["secret"])
    except SignatureVerificationError as e:
        raise Refused(f"SignatureVerificationError {e}")


def coinbase_sign(req):
    # The SDK's own HMAC (a private helper: it has no public signer).
    from coinbase_commerce.webhook import WebhookSignature

    signature = WebhookSignature._compute_signature(req["body"], req["secret"])
    return {"headers": [["X-CC-Webhook-Signature", signature]]}


# --- Discord: discord-interactions, verify_key (verify only) -------------

# Discord signs with its private key, which neither the SDK nor the receiver
# holds: the driver signs with PyNaCl (the SDK's own dependency) under this
# fixed seed, whose public key is the test's secret.
DISCORD_SEED = bytes(range(32))


def discord_verify(req):
    from discord_interactions import verify_key

    if not verify_key(
        req["body"].encode(),
        header(req, "x-signature-ed25519") or "",
        header(req, "x-signature-timestamp") or "",
        req["secret"],
    ):
        raise Refused("verify_key: False")


def discord_sign(req):
    from nacl.signing import SigningKey

    key = SigningKey(DISCORD_SEED)
    if key.verify_key.encode().hex() != req["secret"]:
        raise SystemExit("the test's public key is not the driver's seed's")
    timestamp = str(req["timestamp"])
    signature = key.sign(timestamp.encode() + req["body"].encode()).signature.hex()
    return {
        "headers": [
            ["X-Signature-Ed25519", signature],
            ["X-Signature-Timestamp", timestamp],
        ]
    }


SDKS = {
    "stripe": (stripe_verify, stripe_sign),
    "standard-webhooks": (standard_verify, standard_sign),
    "clerk": (svix_verify, svix_sign),
    "slack": (slack_verify, slack_sign),
    "paddle": (paddle_verify, paddle_sign),
    "square": (square_verify, None),
    "adyen": (adyen_verify, adyen_sign),
    "razorpay": (razorpay_verify, None),
    "gocardless": (gocardless_verify, None),
    "braintree": (braintree_verify, braintree_sign),
    "mercadopago": (mercadopago_verify, None),
    "twilio": (twilio_verify, twilio_sign),
    "hubspot": (hubspot_verify, hubspot_sign),
    "coinbase-commerce": (coinbase_verify, coinbase_sign),
    "discord": (discord_verify, discord_sign),
}


def main():
    req = json.load(sys.stdin)
    verify, sign = SDKS[req["provider"]]
    # Some SDKs print or log to stdout (discord-interactions prints the
    # exception it swallows); stdout carries only the answer.
    with contextlib.redirect_stdout(sys.stderr):
        if req["op"] == "verify":
            try:
                verify(req)
                answer = {"ok": True, "why": ""}
            except Refused as e:
                answer = {"ok": False, "why": str(e)}
        elif req["op"] == "sign":
            if sign is None:
                raise SystemExit(f"the {req['provider']} SDK cannot sign")
            answer = {"headers": [], "body": req["body"], "query": ""}
            answer.update(sign(req))
        else:
            raise SystemExit(f"unknown op {req['op']!r}")
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
