// "Ask past runs" (issue 27): searches what this account's agents did before — the request,
// the tools in order, the outcome, when and the chat — by keyword (BM25), re-ranked by
// embeddings when an administrator configured an embeddings endpoint. The server scopes the
// search to the caller's account; this panel only shows what it answers.

import { useEffect, useState } from 'preact/hooks';
import type { Client, KnowledgeResult, KnowledgeStats } from '../api';
import { messageFor } from '../errors';

interface PastRunsProps {
  client: Client;
  onClose: () => void;
}

/** How a search retrieves, in words for the panel. */
export function modeText(mode: 'hybrid' | 'keyword'): string {
  return mode === 'hybrid'
    ? 'Keyword search (BM25) re-ranked by embeddings.'
    : 'Keyword search only (BM25): no embeddings endpoint is configured, so paraphrases need shared words.';
}

/** The search panel above a conversation. */
export function PastRuns({ client, onClose }: PastRunsProps) {
  const [stats, setStats] = useState<KnowledgeStats | null>(null);
  const [query, setQuery] = useState('');
  const [result, setResult] = useState<KnowledgeResult | null>(null);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    client.knowledgeStats().then(setStats, (err) => setError(messageFor(err)));
  }, [client]);

  const search = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      setResult(await client.searchKnowledge(query.trim()));
    } catch (err) {
      setResult(null);
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const mode = result?.mode ?? stats?.mode;
  return (
    <section class="past-runs card" id="past-runs" aria-label="Ask past runs">
      <form class="past-runs-form" onSubmit={search} role="search">
        <input
          id="past-runs-query"
          type="search"
          placeholder="Ask past runs: what was done before, e.g. “compress the photos”"
          aria-label="Ask past runs"
          value={query}
          maxLength={1000}
          onInput={(e) => setQuery(e.currentTarget.value)}
          disabled={busy}
        />
        <button class="btn small primary" type="submit" id="past-runs-search" disabled={busy || query.trim() === ''}>
          {busy ? 'Searching…' : 'Search'}
        </button>
        <button class="btn small ghost" type="button" onClick={onClose} aria-label="Close past runs">
          ✕
        </button>
      </form>
      {mode && (
        <p class="muted small" id="past-runs-mode">
          {stats ? `${stats.runs} past run${stats.runs === 1 ? '' : 's'} of your account. ` : ''}
          {modeText(mode)}
        </p>
      )}
      {result?.notice && (
        <p class="muted small warn" id="past-runs-notice">
          {result.notice}
        </p>
      )}
      {error !== '' && (
        <p class="form-error" role="alert" id="past-runs-error">
          {error}
        </p>
      )}
      {result && result.hits.length === 0 && (
        <p class="muted" id="past-runs-empty" role="status">
          No past run matches “{result.query}”.
        </p>
      )}
      {result && result.hits.length > 0 && (
        <ol class="past-runs-list" id="past-runs-results">
          {result.hits.map((h) => (
            <li key={h.id} class="past-run">
              <div class="past-run-head">
                <span class={`badge ${h.status === 'success' ? 'ok' : 'warn'}`}>{h.status}</span>{' '}
                <time dateTime={h.endedAt}>{new Date(h.endedAt).toLocaleString()}</time>
                {h.agentName ? ` · ${h.agentName}` : ''}
              </div>
              <p class="past-run-request">{h.request}</p>
              <p class="muted small">
                {h.tools.length > 0 ? `Tools (${h.toolCalls} calls): ${h.tools.join(' → ')}` : 'No tools used.'}
              </p>
              {h.error && <p class="small form-error">{h.error}</p>}
              {h.result && <p class="small past-run-result">{h.result}</p>}
              <a class="small" href={h.link}>
                Open the chat
              </a>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}
