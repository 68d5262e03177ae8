import { describe, expect, it } from 'vitest';
import type { Agent } from './api';
import { computerLabel, computerOptions, offersHostEnvironment } from './computer';
import { allowHost, chooseComputer } from './selection';

const base: Agent = {
  id: 'a1',
  name: 'A',
  computer: 'vm',
  allowHostEnvironment: true,
  createdAt: '',
  updatedAt: '',
};

describe('selection requests', () => {
  it('choosing a type sends the flag as the server last reported it', () => {
    expect(chooseComputer(base, 'browser')).toEqual({ computer: 'browser', allowHostEnvironment: true });
    expect(chooseComputer({ ...base, computer: 'browser', allowHostEnvironment: false }, 'vm')).toEqual({
      computer: 'vm',
      allowHostEnvironment: false,
    });
  });
  it('ticking the box keeps the type', () => {
    expect(allowHost({ ...base, allowHostEnvironment: false }, true)).toEqual({ computer: 'vm', allowHostEnvironment: true });
    expect(allowHost({ ...base, computer: 'cloud' }, false)).toEqual({ computer: 'cloud', allowHostEnvironment: false });
  });
});

describe('computer options', () => {
  it('lists the six types of the API once each', () => {
    expect(computerOptions.map((o) => o.value)).toEqual(['vm', 'cloud', 'host', 'browser', 'auto', 'none']);
  });
  const labels: Array<[string, string]> = [
    ['vm', 'Local VM'],
    ['cloud', 'Cloud'],
    ['host', 'Host'],
    ['browser', 'Browser only'],
    ['auto', 'Auto'],
    ['none', 'None'],
    ['future-type', 'future-type'],
  ];
  for (const [value, label] of labels) {
    it(`labels ${value}`, () => expect(computerLabel(value)).toBe(label));
  }
  const offers: Array<[string, boolean]> = [
    ['vm', true],
    ['cloud', true],
    ['host', false],
    ['browser', false],
    ['auto', false],
    ['none', false],
  ];
  for (const [value, want] of offers) {
    it(`host checkbox offered for ${value}: ${want}`, () => expect(offersHostEnvironment(value)).toBe(want));
  }
});
