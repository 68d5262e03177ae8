import { describe, expect, it } from 'vitest';
import { secretLines } from './ToolsSettings';

describe('secretLines', () => {
  it('reads headers and keeps saved (masked) values as null', () => {
    const saved = { Authorization: '••••6789' };
    expect(secretLines('Authorization: ••••6789\nX-Team: blue\n\n', ':', saved)).toEqual({ Authorization: null, 'X-Team': 'blue' });
  });
  it('sends a changed value, and values with the separator in them whole', () => {
    expect(secretLines('Authorization: Bearer a:b', ':', { Authorization: '••••6789' })).toEqual({ Authorization: 'Bearer a:b' });
    expect(secretLines('TOKEN=a=b', '=', {})).toEqual({ TOKEN: 'a=b' });
  });
  it('a removed line removes the secret', () => {
    expect(secretLines('', '=', { TOKEN: '••••' })).toEqual({});
  });
});
