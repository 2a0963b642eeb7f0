#!/usr/bin/env python3
"""Writes tests/fixtures/golden-vectors.json: nudge's own wire formats, computed
here from their written definitions (README "Annotations", design §3) with
Python's hashlib/hmac, independently of the Rust code the vectors pin.

Formats:
- object fingerprint: for each entry in ascending byte order of its key: the key
  length-prefixed, a tag byte (0 ConfigMap `data` text, 1 `binaryData` or Secret
  bytes), the value length-prefixed; lengths are 8-byte big-endian. ConfigMap:
  "sha256-" + hex SHA-256; Secret: "hmac-sha256-" + hex HMAC-SHA256 with the key.
- value fingerprint (Consul, custom sources): "sha256-" + hex SHA-256 of the bytes;
  keyed: "hmac-sha256-" + hex HMAC-SHA256.
- combined config-hash: entries sorted by id (byte order); each id length-prefixed,
  then tag 0 (absent) or tag 1 and the digest length-prefixed; "sha256-" + hex.
- canonical reference id: source "/" [namespace "/"] name ["[" keys "," joined "]"].
- fields fingerprint (`[sources.kubernetes.<name>]`): for each selected field in
  ascending byte order of its JSON pointer: the pointer length-prefixed, then tag 0
  (missing) or tag 1 and the field's canonical JSON length-prefixed (compact,
  members sorted by name, json.dumps escaping). No pointers: one field, the empty
  pointer, valued the object without apiVersion, kind, metadata and status.
  Metadata the API server writes (uid, resourceVersion, managedFields, ...) is
  never selected. "sha256-" + hex SHA-256; secret: "hmac-sha256-" + HMAC-SHA256.
- Reloader 2's SecretProviderClass hash (a compatibility format, pinned here too:
  `GetSHAfromSecretProviderClassPodStatus` in Reloader's internal/pkg/util/util.go):
  the strings "<id>=<version>" of status.objects plus
  "SecretProviderClassName=<class>", sorted (Go's sort.Strings: byte order), joined
  by ";", bare hex SHA-1 (`crypto.GenerateSHA`); its SHA-512/256 builds hash the same
  string with sha512.Sum512_256. The env var is "STAKATER_" +
  ConvertToEnvVarName(class) + "_SECRETPROVIDERCLASS". nudge's native fingerprint of
  the same object (the CSI preset's) is the fields fingerprint of "/status/objects"
  with its entries sorted by id, then version (byte order).

Run: python3 scripts/golden_vectors.py > tests/fixtures/golden-vectors.json
"""
import hashlib
import hmac
import json
import struct

KEY = b"nudge-golden-vector-key-32-bytes!"  # 33 bytes (>= 32)


def lp(data: bytes) -> bytes:
    return struct.pack(">Q", len(data)) + data


def encode_object(entries):
    """entries: list of (key str, tag int, value bytes)."""
    out = b""
    for key, tag, value in sorted(entries, key=lambda e: e[0].encode()):
        out += lp(key.encode()) + bytes([tag]) + lp(value)
    return out


def configmap(entries):
    return "sha256-" + hashlib.sha256(encode_object(entries)).hexdigest()


def secret(entries):
    return "hmac-sha256-" + hmac.new(KEY, encode_object(entries), hashlib.sha256).hexdigest()


def combined(entries):
    out = b""
    for ident, digest in sorted(entries, key=lambda e: e[0].encode()):
        out += lp(ident.encode())
        out += b"\x00" if digest is None else b"\x01" + lp(digest.encode())
    return "sha256-" + hashlib.sha256(out).hexdigest()


NOT_CONTENT = {"apiVersion", "kind", "metadata", "status"}
SERVER_METADATA = {"creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp",
                   "generation", "managedFields", "resourceVersion", "selfLink", "uid"}
MISSING = object()


def resolve(obj, pointer):
    """RFC 6901, written out: the value at pointer, or MISSING."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    if len(tokens) >= 2 and tokens[0] == "metadata" and tokens[1] in SERVER_METADATA:
        return MISSING
    value = obj
    for token in tokens:
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and (token == "0" or not token.startswith("0")) \
                and int(token) < len(value):
            value = value[int(token)]
        else:
            return MISSING
    if tokens == ["metadata"] and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in SERVER_METADATA}
    return value


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def encode_fields(obj, pointers):
    if not pointers:
        fields = [("", {k: v for k, v in obj.items() if k not in NOT_CONTENT})]
    else:
        fields = [(p, resolve(obj, p)) for p in sorted(set(pointers), key=str.encode)]
    out = b""
    for pointer, value in fields:
        out += lp(pointer.encode())
        out += b"\x00" if value is MISSING else b"\x01" + lp(canonical_json(value))
    return out


def fields_fingerprint(obj, pointers):
    return "sha256-" + hashlib.sha256(encode_fields(obj, pointers)).hexdigest()


def fields_keyed(obj, pointers):
    return "hmac-sha256-" + hmac.new(KEY, encode_fields(obj, pointers), hashlib.sha256).hexdigest()


def canonical_id(source, namespace, name, keys):
    ident = source + "/" + (namespace + "/" if namespace else "") + name
    if keys is not None:
        ident += "[" + ",".join(sorted(keys, key=str.encode)) + "]"
    return ident


def reloader_csi_input(cls, objects):
    entries = [f"{i}={v}" for (i, v) in objects] + [f"SecretProviderClassName={cls}"]
    return ";".join(sorted(entries, key=lambda e: e.encode())).encode()


def reloader_env_name(text):
    out, valid = "", False
    for ch in text.upper():
        if "A" <= ch <= "Z" or "0" <= ch <= "9":
            out, valid = out + ch, True
        else:
            if valid:
                out += "_"
            valid = False
    return out


def sorted_objects(obj):
    copy = json.loads(json.dumps(obj))
    copy["status"]["objects"].sort(key=lambda o: (o["id"].encode(), o["version"].encode()))
    return copy


def csi_vector(cls, objects):
    status_objects = [{"id": i, "version": v} for (i, v) in objects]
    obj = {
        "apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
        "metadata": {"name": f"web-1-shop-{cls}", "namespace": "shop", "resourceVersion": "7"},
        "status": {"podName": "web-1", "secretProviderClassName": cls, "mounted": True,
                   "targetPath": "/var/lib/kubelet/pods/x/volumes/y", "objects": status_objects},
    }
    data = reloader_csi_input(cls, objects)
    return {
        "object": obj,
        "env_var": "STAKATER_" + reloader_env_name(cls) + "_SECRETPROVIDERCLASS",
        "reloader_sha1": hashlib.sha1(data).hexdigest(),
        "reloader_sha512_256": hashlib.new("sha512_256", data).hexdigest(),
        "native": fields_fingerprint(sorted_objects(obj), ["/status/objects"]),
    }


def main():
    cm_a = [("a", 0, b"bc")]
    cm_ab = [("ab", 0, b"c")]
    cm_mixed = [("config.yaml", 0, "x: 1\nname: é\n".encode()), ("logo.png", 1, bytes([0, 255, 10]))]
    secret_entries = [("password", 1, b"hunter2"), ("user", 1, b"admin")]
    references = [
        ("configmap", "shop", "app", None),
        ("secret", "shop", "db", ["user", "password"]),
        ("consul", None, "app/config", None),
        ("consul.eu", None, "feature/flags", None),
    ]
    ids = [canonical_id(*r) for r in references]
    combined_inputs = [
        (ids[0], configmap(cm_mixed)),
        (ids[1], secret(secret_entries)),
        (ids[2], None),
    ]
    gizmo = {
        "apiVersion": "example.com/v1", "kind": "Gizmo",
        "metadata": {"name": "g", "namespace": "shop", "resourceVersion": "42", "uid": "u-1",
                     "labels": {"tier": "web"}, "managedFields": [{"manager": "kubectl"}]},
        "spec": {"size": 3, "colours": ["blue", "é"], "nested": {"b": None, "a": True, "~/": "x\ny"}},
        "data": {"a/b": "slash", "t~": "tilde"},
        "status": {"ready": True},
    }
    selections = [[], ["/spec"], ["/spec/size", "/data/a~1b", "/data/t~0"], ["/status", "/nope"],
                  ["/metadata"], ["/metadata/labels", "/metadata/uid"], ["/spec/colours/1"]]
    vectors = {
        "note": "Generated by scripts/golden_vectors.py from the formats' written definitions; "
        "src/fingerprint.rs and src/stamp tests must reproduce every value.",
        "key_utf8": KEY.decode(),
        "objects": [
            {"kind": "ConfigMap", "entries": cm_a, "fingerprint": configmap(cm_a)},
            {"kind": "ConfigMap", "entries": cm_ab, "fingerprint": configmap(cm_ab)},
            {"kind": "ConfigMap", "entries": cm_mixed, "fingerprint": configmap(cm_mixed)},
            {"kind": "ConfigMap", "entries": [], "fingerprint": configmap([])},
            {"kind": "Secret", "entries": secret_entries, "fingerprint": secret(secret_entries)},
        ],
        "values": [
            {"value_utf8": "hello", "fingerprint": "sha256-" + hashlib.sha256(b"hello").hexdigest(),
             "keyed": "hmac-sha256-" + hmac.new(KEY, b"hello", hashlib.sha256).hexdigest()},
            {"value_utf8": "", "fingerprint": "sha256-" + hashlib.sha256(b"").hexdigest(),
             "keyed": "hmac-sha256-" + hmac.new(KEY, b"", hashlib.sha256).hexdigest()},
        ],
        "references": [
            {"source": s, "namespace": ns, "name": n, "keys": k, "canonical_id": canonical_id(s, ns, n, k)}
            for (s, ns, n, k) in references
        ],
        "fields": [
            {"object": gizmo, "pointers": sel, "fingerprint": fields_fingerprint(gizmo, sel),
             "keyed": fields_keyed(gizmo, sel)}
            for sel in selections
        ],
        "reloader_csi": [
            csi_vector("vault-db", [("secret/data/db", "3"), ("secret/data/api", "12")]),
            # "=" and ";" inside ids are hashed as written; "Z" sorts before "a".
            csi_vector("aws.api-keys", [("Zeta", "v=1"), ("alpha;b", ""), ("SecretProviderClassName", "x")]),
            csi_vector("empty", []),
        ],
        "combined": [
            {"entries": combined_inputs, "config_hash": combined(combined_inputs)},
            {"entries": [], "config_hash": combined([])},
        ],
    }
    # Entries as JSON: values base64 would hide them; bytes as arrays of numbers.
    for obj in vectors["objects"]:
        obj["entries"] = [{"key": k, "tag": t, "value": list(v)} for (k, t, v) in obj["entries"]]
    for c in vectors["combined"]:
        c["entries"] = [{"id": i, "digest": d} for (i, d) in c["entries"]]
    print(json.dumps(vectors, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
