"""Keys and tokens of a test identity provider, made with PyJWT and cryptography.

Run by Debian's /usr/bin/python3 (python3-jwt, python3-cryptography): the e2e harness's python may
lack them, so test_idp.py calls this as a subprocess. One JSON request on stdin, one JSON answer on
stdout:

  {"op": "keys", "dir": D}    writes D/<name>.pem (private keys) for rsa, rsa2, ec, ed and answers
                              {"jwks": {name: JWK with kid=name, ...}, "public_pem": {name: PEM}}
  {"op": "sign", "dir": D, "tokens": [{"key": name, "alg": A, "claims": {...},
                                       "headers": {...}}, ...]}
                              answers {"tokens": [JWT, ...]}; headers may set kid (none by default)
"""

import json
import os
import sys

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

NAMES = ("rsa", "rsa2", "ec", "ed")


def _new_key(name):
    if name.startswith("rsa"):
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if name == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def _jwk(name, public):
    if name.startswith("rsa"):
        text = RSAAlgorithm.to_jwk(public)
    elif name == "ec":
        text = ECAlgorithm.to_jwk(public)
    else:
        text = OKPAlgorithm.to_jwk(public)
    jwk = json.loads(text)
    jwk["kid"] = name
    jwk["use"] = "sig"
    return jwk


def _load(d, name):
    with open(os.path.join(d, name + ".pem"), "rb") as f:
        return serialization.load_pem_private_key(f.read(), password=None)


def keys(d):
    jwks, pems = {}, {}
    for name in NAMES:
        key = _new_key(name)
        with open(os.path.join(d, name + ".pem"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        jwks[name] = _jwk(name, key.public_key())
        pems[name] = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return {"jwks": jwks, "public_pem": pems}


def sign(d, specs):
    cache, out = {}, []
    for spec in specs:
        name = spec["key"]
        if name not in cache:
            cache[name] = _load(d, name)
        out.append(jwt.encode(spec["claims"], cache[name], algorithm=spec["alg"],
                              headers=spec.get("headers") or None))
    return {"tokens": out}


def main():
    req = json.load(sys.stdin)
    if req["op"] == "keys":
        ans = keys(req["dir"])
    elif req["op"] == "sign":
        ans = sign(req["dir"], req["tokens"])
    else:
        raise SystemExit("unknown op %r" % req["op"])
    json.dump(ans, sys.stdout)


if __name__ == "__main__":
    main()
