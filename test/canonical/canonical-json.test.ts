import { describe, expect, it } from 'vitest';
import { canonicalBytes, canonicalJson, parseCanonical, sameJson } from '../../src/canonical/canonical-json';
import { expectInvalid } from './expect-invalid';

describe('canonicalJson (RFC 8785)', () => {
  it('reproduces the RFC 8785 §3.2.2 sample', () => {
    const input = JSON.parse(
      '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],' +
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", "literals": [null, true, false]}',
    ) as unknown;
    expect(canonicalJson(input)).toBe(
      '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
  });

  it('sorts keys by UTF-16 code units (RFC 8785 §3.2.3), not by code points', () => {
    const doc = {
      '\u20ac': 'Euro',
      '\r': 'CR',
      '\ufb33': 'Hebrew',
      '1': 'One',
      '\ud83d\ude00': 'Smiley',
      '\u0080': 'Ctl',
      '\u00f6': 'Latin',
    };
    // U+1F600 (surrogates D83D DE00) sorts before U+FB33 in UTF-16 order.
    expect(canonicalJson(doc)).toBe(
      '{"\\r":"CR","1":"One","\u0080":"Ctl","\u00f6":"Latin","\u20ac":"Euro","\ud83d\ude00":"Smiley","\ufb33":"Hebrew"}',
    );
    expect(canonicalJson({ b: 1, a: { d: 2, c: 3 }, B: 0 })).toBe('{"B":0,"a":{"c":3,"d":2},"b":1}');
  });

  it('formats numbers as ECMAScript does', () => {
    expect(canonicalJson([1e21, 1e20, -0, 0.1, 5e-324, 1e-7, 123456789012345680000, -1.5])).toBe(
      '[1e+21,100000000000000000000,0,0.1,5e-324,1e-7,123456789012345680000,-1.5]',
    );
  });

  it('escapes only what JSON requires and keeps other unicode literal', () => {
    expect(canonicalJson({ s: '\u0000\u001f\u007f\u2028é😀"\\/' })).toBe(
      '{"s":"\\u0000\\u001f\u007f\u2028é😀\\"\\\\/"}',
    );
  });

  it('returns UTF-8 bytes', () => {
    expect(canonicalBytes({ é: 'ü' }).toString('hex')).toBe(Buffer.from('{"é":"ü"}', 'utf8').toString('hex'));
    expect(canonicalBytes({ é: 'ü' }).length).toBe(11);
  });

  it.each([
    ['undefined property', { a: 1, b: undefined }, '/b'],
    ['undefined in array', [1, undefined], '/1'],
    ['top-level undefined', undefined, ''],
    ['function', { f: () => 1 }, '/f'],
    ['NaN', { n: NaN }, '/n'],
    ['Infinity', [Infinity], '/0'],
    ['-Infinity', { x: { y: -Infinity } }, '/x/y'],
    ['bigint', { n: 1n }, '/n'],
    ['symbol', { s: Symbol('s') }, '/s'],
    ['Date', { at: new Date(0) }, '/at'],
    ['Buffer', { b: Buffer.from('x') }, '/b'],
    ['Map', { m: new Map() }, '/m'],
    [
      'class instance',
      {
        c: new (class Point {
          x = 1;
        })(),
      },
      '/c',
    ],
    // eslint-disable-next-line no-sparse-arrays -- the hole is the case under test
    ['sparse array', { a: [1, , 3] }, '/a/1'],
    ['lone surrogate', { s: 'a\ud800' }, '/s'],
    ['key with slash is escaped in the pointer', { 'a/b~': undefined }, '/a~1b~0'],
    ['a value after valid siblings, nested', { a: [1, { x: 'y' }], b: { c: [0, Number.NaN] } }, '/b/c/1'],
  ])('rejects %s', (_name, value, field) => {
    expectInvalid(() => canonicalJson(value), field);
  });

  it('rejects cycles', () => {
    const a: Record<string, unknown> = {};
    a.self = a;
    expectInvalid(() => canonicalJson(a), '/self', /circular/);
  });

  it('accepts a null-prototype object and repeated (non-cyclic) references', () => {
    const o = Object.create(null) as Record<string, unknown>;
    o.z = 1;
    o.a = 2;
    const shared = { k: true };
    expect(canonicalJson(o)).toBe('{"a":2,"z":1}');
    expect(canonicalJson([shared, shared])).toBe('[{"k":true},{"k":true}]');
  });
});

describe('parseCanonical', () => {
  it('parses canonical text', () => {
    expect(parseCanonical('{"a":[1,"x",null],"b":true}')).toEqual({ a: [1, 'x', null], b: true });
  });

  it.each([
    ['whitespace', '{"a": 1}'],
    ['unsorted keys', '{"b":1,"a":2}'],
    ['duplicate keys', '{"a":1,"a":1}'],
    ['non-canonical number', '{"a":1.0}'],
    ['unnecessary escape', '{"a":"\\u0041"}'],
  ])('rejects non-canonical text (%s) by default', (_name, text) => {
    expectInvalid(() => parseCanonical(text), '', /canonical/);
  });

  it('accepts non-canonical text when asked not to check', () => {
    expect(parseCanonical('{"b": 1, "a": 2.0}', { requireCanonical: false })).toEqual({ a: 2, b: 1 });
  });

  it('gives a fresh value on every parse of a text it already proved canonical', () => {
    const text = '{"a":[1,{"b":"x"}],"c":null}';
    const first = parseCanonical(text) as { a: unknown[] };
    first.a.push('mutated');
    expect(parseCanonical(text)).toEqual({ a: [1, { b: 'x' }], c: null });
    expect(parseCanonical(text)).not.toBe(parseCanonical(text));
  });

  it('still rejects a non-canonical text after parsing canonical ones (including its non-canonical twin)', () => {
    expect(parseCanonical('{"a":1,"b":2}')).toEqual({ a: 1, b: 2 });
    expectInvalid(() => parseCanonical('{"b":2,"a":1}'), '', /canonical/);
    expectInvalid(() => parseCanonical('{"a":1, "b":2}'), '', /canonical/);
  });

  it('rejects text that is not JSON', () => {
    expectInvalid(() => parseCanonical('{"a":'), '', /not valid JSON/);
    expectInvalid(() => parseCanonical(42 as unknown as string), '', /expected JSON text/);
  });
});

describe('sameJson', () => {
  const nullProto = Object.assign(Object.create(null) as Record<string, unknown>, { b: [1, { c: 'x' }], a: null });
  const values: unknown[] = [
    null,
    true,
    false,
    0,
    -0,
    1,
    1.5,
    1e21,
    '',
    '0',
    'x',
    'é',
    [],
    [1],
    [1, 2],
    [2, 1],
    [[1]],
    {},
    { 0: 1 },
    { a: 1 },
    { a: 1, b: 2 },
    { b: 2, a: 1 },
    { a: 1, b: 3 },
    { a: { b: [1, 2] } },
    { a: { b: [1, 2, 3] } },
    { a: null, b: [1, { c: 'x' }] },
    nullProto,
    { a: null, b: [1, { c: 'y' }] },
  ];

  it('answers exactly what comparing the two canonical texts answers, for every pair', () => {
    let equal = 0;
    for (const a of values) {
      for (const b of values) {
        const byText = canonicalJson(a) === canonicalJson(b);
        expect(sameJson(a, b), `${canonicalJson(a)} vs ${canonicalJson(b)}`).toBe(byText);
        if (byText) equal++;
      }
    }
    // The pairs that are equal only as canonical texts: 0 and -0, reordered keys, a null-prototype object.
    expect(equal).toBeGreaterThan(values.length);
  });

  it('throws, as canonicalJson does, for either side that is not plain JSON', () => {
    expectInvalid(() => sameJson({ a: 1 }, { a: new Date(0) }), '/a');
    expectInvalid(() => sameJson({ a: undefined }, { b: 1 }), '/a');
    expectInvalid(() => sameJson([1], [Number.NaN]), '/0');
    expectInvalid(() => sameJson('\ud800', 'x'), '');
  });
});
