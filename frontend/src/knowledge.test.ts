import { describe, expect, it, vi } from 'vitest';
import { Client } from './api';
import { modeText } from './components/PastRuns';

/** A fetch stand-in recording the requests and answering each with body. */
function recorder(body: unknown) {
  const calls: Array<{ url: string; init: RequestInit }> = [];
  const fn = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    calls.push({ url: String(input), init: init ?? {} });
    return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
  });
  return { fetch: fn as unknown as typeof fetch, calls };
}

describe('knowledge routes', () => {
  it('searches with the query escaped and the limit given', async () => {
    const f = recorder({ query: 'zip & photos', mode: 'keyword', hits: [] });
    const c = new Client({ baseUrl: 'http://x', fetch: f.fetch });
    const res = await c.searchKnowledge('zip & photos', 3);
    expect(res.mode).toBe('keyword');
    expect(f.calls[0].url).toBe('http://x/api/app/knowledge/search?q=zip+%26+photos&limit=3');
    expect(f.calls[0].init.method).toBe('GET');
  });

  it('clears one account or every account', async () => {
    const f = recorder({ removed: 2, account: '' });
    const c = new Client({ baseUrl: 'http://x', fetch: f.fetch });
    await c.clearKnowledge('a/1');
    await c.clearKnowledge();
    expect(f.calls.map((x) => [x.init.method, x.url])).toEqual([
      ['DELETE', 'http://x/api/app/admin/knowledge?account=a%2F1'],
      ['DELETE', 'http://x/api/app/admin/knowledge'],
    ]);
  });

  it('sends the embeddings setting and never expects the key back', async () => {
    const f = recorder({ baseUrl: 'https://e/v1', model: 'm', hasApiKey: true, allowPrivate: false, configured: true });
    const c = new Client({ baseUrl: 'http://x', fetch: f.fetch });
    const v = await c.setEmbeddings({ baseUrl: 'https://e/v1', model: 'm', apiKey: 'sk' });
    expect(v.configured).toBe(true);
    expect(JSON.parse(String(f.calls[0].init.body))).toEqual({ baseUrl: 'https://e/v1', model: 'm', apiKey: 'sk' });
    expect(f.calls[0].init.method).toBe('PUT');
  });
});

describe('modeText', () => {
  it('says when search is keyword only', () => {
    expect(modeText('keyword')).toMatch(/keyword search only/i);
    expect(modeText('keyword')).toMatch(/no embeddings endpoint/);
    expect(modeText('hybrid')).toMatch(/re-ranked by embeddings/);
  });
});
