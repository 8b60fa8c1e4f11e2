// Verify a tpmledger Sigstore bundle v0.3 with @sigstore/verify against a trusted PEM key.
// Usage: node verify_bundle.js BUNDLE.json SERVICE.pub
// The key is trusted out of band (no Fulcio, Rekor or TSA), so every log/timestamp threshold
// is 0: this checks the DSSE signature over the PAE only, as cosign --insecure-ignore-tlog does.
'use strict';
const fs = require('fs');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

const [bundlePath, keyPath] = process.argv.slice(2);
const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundlePath, 'utf8')));
const hint = bundle.verificationMaterial.content.publicKey.hint;
const emptyRoot = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
const keys = { [hint]: { rawBytes: fs.readFileSync(keyPath, 'utf8') } };
const verifier = new Verifier(toTrustMaterial(emptyRoot, keys), {
  tlogThreshold: 0,
  ctlogThreshold: 0,
  timestampThreshold: 0,
});
try {
  verifier.verify(toSignedEntity(bundle));
  console.log('OK sigstore-js verified the DSSE signature with key ' + hint);
} catch (err) {
  console.log('FAIL ' + (err.code || '') + ' ' + err.message);
  process.exit(1);
}
