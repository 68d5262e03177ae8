// The right-hand computer panel of a chat: which computer the agent uses and, for a Local
// VM, its image, lifecycle and live screen. Every change goes to the server; the panel shows
// the agent it answers with.

import { useState } from 'preact/hooks';
import type { Agent, Client, ComputerSelection } from '../api';
import { computerLabel, computerOptions, offersHostEnvironment } from '../computer';
import { messageFor } from '../errors';
import { allowHost, chooseComputer } from '../selection';
import { AgentModelSection } from './AgentModelSection';
import { AgentRules } from './AgentRules';
import { LocalVMControls } from './LocalVMControls';

interface ComputerPanelProps {
  client: Client;
  agent: Agent;
  onAgent: (agent: Agent) => void;
  onClose: () => void;
  onOpenDesktop: () => void;
  onOpenDual: () => void;
  desktopOpen: boolean;
}

/** The computer panel. */
export function ComputerPanel({ client, agent, onAgent, onClose, onOpenDesktop, onOpenDual, desktopOpen }: ComputerPanelProps) {
  // The request in flight, shown until the server answers; then the agent is the truth.
  const [pending, setPending] = useState<ComputerSelection | null>(null);
  const [error, setError] = useState('');

  const shown: ComputerSelection = pending ?? {
    computer: agent.computer,
    allowHostEnvironment: agent.allowHostEnvironment,
  };

  const save = async (sel: ComputerSelection) => {
    if (pending) return;
    setPending(sel);
    setError('');
    try {
      onAgent(await client.setComputerSelection(agent.id, sel));
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setPending(null);
    }
  };

  return (
    <aside class="computer-panel" id="computer-panel" aria-label="Computer">
      <div class="panel-head">
        <div class="panel-title">
          <h2>Computer</h2>
          <span class="muted small">{agent.name}</span>
        </div>
        <button class="btn ghost small icon" type="button" aria-label="Close computer panel" onClick={onClose}>
          ✕
        </button>
      </div>

      <section class="panel-section computer-choice" aria-labelledby="computer-type-title">
        <h3 id="computer-type-title">Computer type</h3>
        <div class="choice-grid" role="radiogroup" aria-labelledby="computer-type-title" id="computer-selector">
          {computerOptions.map((o) => (
            <label class={`choice${shown.computer === o.value ? ' selected' : ''}`} key={o.value} title={o.hint}>
              <input
                type="radio"
                name="computer"
                value={o.value}
                checked={shown.computer === o.value}
                disabled={pending !== null}
                onChange={() => void save(chooseComputer(agent, o.value))}
              />
              <span class="choice-label">{o.label}</span>
            </label>
          ))}
        </div>
        {offersHostEnvironment(shown.computer) && (
          <label class="checkbox" id="allow-host-row">
            <input
              id="allow-host-environment"
              type="checkbox"
              checked={shown.allowHostEnvironment}
              disabled={pending !== null}
              onChange={(e) => void save(allowHost(agent, e.currentTarget.checked))}
            />
            <span>
              <span class="checkbox-label">Allow host environment</span>
              <span class="muted small">
                Host shell and file tools run on the execution node with the runner user's permissions. The VM
                itself stays isolated.
              </span>
            </span>
          </label>
        )}
        <p class="muted small status-line" aria-live="polite">
          {pending ? 'Saving…' : `Saved: ${computerLabel(agent.computer)}${agent.allowHostEnvironment ? ' + host environment' : ''}`}
        </p>
        {error !== '' && (
          <p class="form-error" role="alert" id="computer-error">
            {error}
          </p>
        )}
      </section>

      <section class="panel-section computer-phone-note" aria-label="Computer on phones">
        <p>
          <strong>{computerLabel(agent.computer)}</strong>
          {agent.allowHostEnvironment ? ' · host environment allowed' : ''}
        </p>
        <p class="muted small">Change this agent's computer on the desktop app or a wider screen.</p>
      </section>

      <AgentModelSection client={client} agentId={agent.id} />
      <AgentRules client={client} agentId={agent.id} />

      {agent.computer === 'vm' ? (
        <LocalVMControls
          client={client}
          agentId={agent.id}
          onOpenDesktop={onOpenDesktop}
          onOpenDual={onOpenDual}
          desktopOpen={desktopOpen}
        />
      ) : (
        <section class="panel-section">
          <div class="empty-state screen-empty" id="computer-empty">
            <svg viewBox="0 0 32 32" width="36" height="36" aria-hidden="true">
              <rect x="3" y="5" width="26" height="18" rx="3" fill="none" stroke="currentColor" stroke-width="2" />
              <rect x="11" y="25" width="10" height="3" rx="1" fill="currentColor" />
            </svg>
            <p class="empty-title">No desktop for {computerLabel(agent.computer)}</p>
            <p class="muted small">Choose Local VM to create a desktop and watch its live screen here.</p>
          </div>
        </section>
      )}
    </aside>
  );
}
