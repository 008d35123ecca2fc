// The plugin's own SHA-256 against the FIPS 180-4 examples and against Node's crypto.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';

import { sha256 } from '../src/mask.js';

const hex = (bytes) => Buffer.from(bytes).toString('hex');
const ascii = (s) => new TextEncoder().encode(s);

test('known vectors', () => {
  const vectors = [
    ['', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
    ['abc', 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'],
    [
      'abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq',
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    ],
    [
      'abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu',
      'cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1',
    ],
    ['a'.repeat(1000000), 'cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0'],
  ];
  for (const [input, expected] of vectors) {
    assert.equal(hex(sha256(ascii(input))), expected, `sha256 of ${input.length} bytes`);
  }
});

test('matches node:crypto on every length across several block boundaries', () => {
  let seed = 1;
  const next = () => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
  for (let length = 0; length <= 300; length++) {
    const input = Uint8Array.from({ length }, next);
    assert.equal(hex(sha256(input)), createHash('sha256').update(input).digest('hex'), `length ${length}`);
  }
});
