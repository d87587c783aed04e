"""``nnvm keygen``, ``nnvm sign`` and ``nnvm verify``: the command-line side of signed
artifacts (``nnvm.runtime.signing`` holds the why and the trust model)."""

from __future__ import annotations

import os


def add_commands(sub, formatter) -> None:
    p = sub.add_parser("keygen", help="make an Ed25519 key pair for signing artifacts",
                       formatter_class=formatter,
                       description="Write a private key (PEM, mode 0600) and KEY.pub (one "
                                   "OpenSSH line) for nnvm compile --sign / nnvm sign. "
                                   "Needs nnvm-core[sign].",
                       epilog="examples:\n  nnvm keygen -o ~/.config/nnvm/signing.key")
    p.add_argument("-o", "--output", required=True, metavar="KEY", help="private key path")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("sign", help="sign an artifact (or re-sign it)",
                       formatter_class=formatter,
                       description="Verify the artifact, then add a signature of its manifest "
                                   "(which lists every member's sha256) as member "
                                   "manifest.sig.",
                       epilog="examples:\n  nnvm sign model.nnvm --key signing.key\n"
                              "  nnvm sign model.nnvm --key signing.key -o signed.nnvm")
    p.add_argument("artifact", help="a .nnvm file")
    p.add_argument("--key", required=True, metavar="KEY", help="private key from nnvm keygen")
    p.add_argument("-o", "--output", metavar="OUT.nnvm", help="write here (default: in place)")
    p.set_defaults(func=cmd_sign)

    p = sub.add_parser("verify", help="check an artifact's hashes and signature",
                       formatter_class=formatter,
                       description="Check every member's sha256 and, with --trusted-key or "
                                   "NNVM_TRUSTED_KEYS, that a trusted key signed it. Exit 0 "
                                   "when it would load under that policy.",
                       epilog="examples:\n  nnvm verify model.nnvm --trusted-key signing.key.pub"
                              "\n  NNVM_TRUSTED_KEYS=keys/ nnvm verify model.nnvm")
    p.add_argument("artifact", help="a .nnvm file")
    p.add_argument("--trusted-key", action="append", metavar="KEY.pub",
                   help="a trusted public key, repeatable (default: NNVM_TRUSTED_KEYS)")
    p.set_defaults(func=cmd_verify)


def cmd_keygen(args) -> int:
    from .runtime.signing import generate_keypair

    priv, pub = generate_keypair(os.path.expanduser(args.output))
    print(f"wrote {priv} (private: keep it secret) and {pub} (public: give it to whoever "
          f"loads your artifacts)")
    return 0


def cmd_sign(args) -> int:
    from .runtime.artifact import sign_artifact

    kid = sign_artifact(args.artifact, args.key, args.output)
    print(f"signed {args.output or args.artifact} with key {kid}")
    return 0


def cmd_verify(args) -> int:
    from .cli import CLIError
    from .runtime.artifact import read_artifact
    from .runtime.signing import TRUST_ENV

    artifact = read_artifact(args.artifact, trusted_keys=args.trusted_key)
    if artifact.signer is None:
        if args.trusted_key is None and not os.environ.get(TRUST_ENV):
            raise CLIError(f"nnvm verify {args.artifact}: hashes ok, but no trust policy was "
                           f"given, so the signature was not checked. Pass --trusted-key "
                           f"KEY.pub or set {TRUST_ENV}")
    print(f"{args.artifact}: ok (every member's sha256 matches; signed by trusted key "
          f"{artifact.signer})")
    return 0
