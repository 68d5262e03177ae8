// The agent's "always allow" rules, in the computer panel: what a person allowed for this
// agent while confirming its calls, each removable (the rules live on the server, per agent).

import { useEffect, useState } from 'preact/hooks';
import type { AllowRule, Client } from '../api';
import { messageFor } from '../errors';

/** The list of the agent's allow rules with a remove button each; nothing when there are none. */
export function AgentRules({ client, agentId }: { client: Client; agentId: string }) {
  const [rules, setRules] = useState<AllowRule[]>([]);
  const [error, setError] = useState('');
  const load = () => client.agentAllowRules(agentId).then(setRules, (err) => setError(messageFor(err)));
  useEffect(() => {
    setRules([]);
    setError('');
    void load();
  }, [client, agentId]);
  const remove = async (id: string) => {
    setError('');
    try {
      await client.deleteAgentAllowRule(agentId, id);
    } catch (err) {
      setError(messageFor(err));
    }
    await load();
  };
  if (rules.length === 0 && error === '') return null;
  return (
    <section class="panel-section" id="agent-rules" aria-labelledby="agent-rules-title">
      <h3 id="agent-rules-title">Always allowed</h3>
      {error !== '' && <p class="form-error small">{error}</p>}
      <ul class="rule-list">
        {rules.map((r) => (
          <li key={r.id} data-rule={r.id}>
            <code>{r.tool}</code> <code>{r.command ? r.command : r.pattern ? `re: ${r.pattern}` : 'every call'}</code>
            <button class="btn small ghost" type="button" onClick={() => void remove(r.id)}>
              Remove
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}
