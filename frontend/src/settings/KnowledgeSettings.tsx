// Settings → Model → Knowledge of past runs (admin only, issue 27): the optional embeddings
// endpoint (OpenAI-compatible POST /embeddings; its key sealed like model keys, under the
// same egress rules) and clearing the past runs of one account or of all.

import { useEffect, useState } from 'preact/hooks';
import type { Account, Client, EmbeddingsSettings, EmbeddingsUpdate } from '../api';
import { messageFor } from '../errors';

interface KnowledgeSettingsProps {
  client: Client;
}

/** The knowledge card under the model settings. */
export function KnowledgeSettings({ client }: KnowledgeSettingsProps) {
  const [view, setView] = useState<EmbeddingsSettings | null>(null);
  const [baseUrl, setBaseUrl] = useState('');
  const [model, setModel] = useState('');
  const [apiKey, setApiKey] = useState('');
  const [allowPrivate, setAllowPrivate] = useState(false);
  const [users, setUsers] = useState<Account[]>([]);
  const [account, setAccount] = useState('');
  const [error, setError] = useState('');
  const [status, setStatus] = useState('');
  const [busy, setBusy] = useState(false);

  const show = (v: EmbeddingsSettings) => {
    setView(v);
    setBaseUrl(v.baseUrl);
    setModel(v.model);
    setApiKey('');
    setAllowPrivate(v.allowPrivate);
  };

  useEffect(() => {
    client.getEmbeddings().then(show, (err) => setError(messageFor(err)));
    client.listUsers().then(setUsers, () => setUsers([]));
  }, [client]);

  const save = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setStatus('');
    const u: EmbeddingsUpdate = { baseUrl: baseUrl.trim(), model: model.trim(), allowPrivate };
    if (apiKey !== '') u.apiKey = apiKey;
    try {
      show(await client.setEmbeddings(u));
      setStatus('Saved.');
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  const clear = async () => {
    const whose = account === '' ? 'every account' : (users.find((u) => u.id === account)?.username ?? account);
    if (!window.confirm(`Remove the past runs of ${whose}? Agents and the chat search will no longer find them.`)) return;
    setBusy(true);
    setError('');
    setStatus('');
    try {
      const res = await client.clearKnowledge(account === '' ? undefined : account);
      setStatus(`Removed ${res.removed} past run${res.removed === 1 ? '' : 's'} of ${whose}.`);
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="settings-section" id="knowledge-settings" aria-labelledby="knowledge-title">
      <h2 id="knowledge-title">Knowledge of past runs</h2>
      <p class="muted">
        Every finished agent turn (the request, the tools in order, the result, success or failure) is kept per account. Agents
        search it with the <code>recall_past_runs</code> tool and people with “Past runs” in a chat; nobody sees another
        account's runs. Search is by keyword (BM25); an embeddings endpoint re-ranks by meaning.
      </p>
      {view && (
        <p class={`summary ${view.configured ? 'ok' : 'warn'}`} id="knowledge-mode">
          {view.configured
            ? `Keyword search re-ranked by embeddings: ${view.model} at ${view.baseUrl}.`
            : 'Keyword search only: no embeddings endpoint is configured.'}
        </p>
      )}
      <form class="card form-grid" id="embeddings-form" onSubmit={save}>
        <label class="field">
          <span>Embeddings base URL (optional)</span>
          <input
            id="embeddings-base-url"
            type="url"
            placeholder="https://api.openai.com/v1 — empty: keyword search only"
            value={baseUrl}
            onInput={(e) => setBaseUrl(e.currentTarget.value)}
            disabled={busy || view === null}
          />
        </label>
        <label class="field">
          <span>Embeddings model</span>
          <input
            id="embeddings-model"
            type="text"
            placeholder="text-embedding-3-small"
            value={model}
            onInput={(e) => setModel(e.currentTarget.value)}
            disabled={busy || view === null}
          />
        </label>
        <label class="field">
          <span>API key</span>
          <input
            id="embeddings-api-key"
            type="password"
            autocomplete="off"
            placeholder={view?.hasApiKey ? 'A key is saved — type to replace it' : 'No key saved'}
            value={apiKey}
            onInput={(e) => setApiKey(e.currentTarget.value)}
            disabled={busy || view === null}
          />
        </label>
        <label class="checkbox">
          <input
            id="embeddings-allow-private"
            type="checkbox"
            checked={allowPrivate}
            disabled={busy || view === null}
            onChange={(e) => setAllowPrivate(e.currentTarget.checked)}
          />
          <span class="checkbox-label">The endpoint is on this machine or the local network (loopback or private addresses are refused otherwise)</span>
        </label>
        <div class="form-actions">
          <button class="btn primary" type="submit" id="embeddings-save" disabled={busy || view === null}>
            Save
          </button>
        </div>
      </form>
      <div class="card form-grid" id="knowledge-clear">
        <label class="field">
          <span>Clear past runs of</span>
          <select id="knowledge-clear-account" value={account} onChange={(e) => setAccount(e.currentTarget.value)} disabled={busy}>
            <option value="">every account</option>
            {users.map((u) => (
              <option key={u.id} value={u.id}>
                {u.username}
              </option>
            ))}
          </select>
        </label>
        <div class="form-actions">
          <button class="btn danger" type="button" id="knowledge-clear-button" onClick={clear} disabled={busy}>
            Clear
          </button>
        </div>
      </div>
      {status !== '' && (
        <p class="muted small" role="status" id="knowledge-status">
          {status}
        </p>
      )}
      {error !== '' && (
        <p class="form-error" role="alert" id="knowledge-error">
          {error}
        </p>
      )}
    </section>
  );
}
