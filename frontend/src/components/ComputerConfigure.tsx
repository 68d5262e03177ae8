// The computer panel's "Configure" section: the computer type and "Allow host environment"
// (SPEC §1.6), the desktop's image (once it exists), the working directory (SPEC §1.7), the
// sandbox binding (lazy_init, SPEC §2.3) and the agent's model. Every change goes to the server;
// what it answers is shown.

import { useEffect, useState } from 'preact/hooks';
import type { Agent, Client, ComputerSelection } from '../api';
import { computerLabel, computerOptions, offersHostEnvironment } from '../computer';
import { messageFor } from '../errors';
import { allowHost, chooseComputer } from '../selection';
import { imageLabel } from '../settings/vmtext';
import { AgentMcpServers } from './AgentMcpServers';
import { ModelSettingsForm } from './ModelSettingsForm';
import { AgentRules } from './AgentRules';
import { useAgentVM } from './DesktopActions';

interface ComputerConfigureProps {
  client: Client;
  agent: Agent;
  onAgent: (agent: Agent) => void;
}

/** The Configure section. */
export function ComputerConfigure({ client, agent, onAgent }: ComputerConfigureProps) {
  // The request in flight, shown until the server answers; then the agent is the truth.
  const [pending, setPending] = useState<ComputerSelection | null>(null);
  const [error, setError] = useState('');

  const shown: ComputerSelection = pending ?? { computer: agent.computer, allowHostEnvironment: agent.allowHostEnvironment };

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
    <div class="configure-body">
      <div class="computer-choice" aria-labelledby="computer-type-title">
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
                Host shell and file tools run on the execution node with the runner user's permissions. The VM itself stays
                isolated.
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
      </div>

      <div class="computer-phone-note" aria-label="Computer on phones">
        <p>
          <strong>{computerLabel(agent.computer)}</strong>
          {agent.allowHostEnvironment ? ' · host environment allowed' : ''}
        </p>
        <p class="muted small">Change this agent's computer on the desktop app or a wider screen.</p>
      </div>

      {agent.computer === 'vm' && <ImageChoice client={client} agentId={agent.id} />}
      {agent.computer !== 'none' && agent.computer !== 'cloud' && <WorkSettings client={client} agent={agent} onAgent={onAgent} />}
      <ModelSettingsForm scope="agent" client={client} agentId={agent.id} />
      <AgentMcpServers client={client} agentId={agent.id} />
      <AgentRules client={client} agentId={agent.id} />
    </div>
  );
}

/** The image of an existing desktop (a new one picks it next to "Create desktop"). */
function ImageChoice({ client, agentId }: { client: Client; agentId: string }) {
  const vm = useAgentVM(client, agentId);
  const [error, setError] = useState('');
  const desk = vm.data?.desktop;
  const images = vm.data?.images ?? [];
  if (!desk || desk.state === 'absent' || (vm.data?.desktops?.length ?? 0) > 0) return null;
  const choose = async (key: string) => {
    setError('');
    try {
      vm.set(await client.setAgentImage(agentId, key));
    } catch (err) {
      setError(messageFor(err));
    }
  };
  return (
    <div class="configure-item">
      <label class="field">
        <span>VM image</span>
        <select id="vm-image" value={desk.imageKey ?? ''} onChange={(e) => void choose(e.currentTarget.value)}>
          {images.map((k) => (
            <option key={k} value={k}>
              {imageLabel(k)}
            </option>
          ))}
        </select>
      </label>
      <p class="muted small">A new image applies when the desktop is recreated; work files are kept.</p>
      {error !== '' && (
        <p class="form-error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

/** The working directory and the sandbox binding. */
function WorkSettings({ client, agent, onAgent }: ComputerConfigureProps) {
  const [dir, setDir] = useState(agent.workdir ?? '');
  const [busy, setBusy] = useState(false);
  const [note, setNote] = useState('');
  const [error, setError] = useState('');
  useEffect(() => setDir(agent.workdir ?? ''), [agent.id, agent.workdir]);
  const lazy = agent.lazyInit ?? true;

  const saveDir = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setNote('');
    try {
      const r = await client.setWorkDir(agent.id, dir);
      onAgent(r.agent);
      setNote(r.rebuilt ? 'Saved; the idle desktop was rebuilt with it (work files kept).' : 'Saved.');
    } catch (err) {
      setError(messageFor(err));
    } finally {
      setBusy(false);
    }
  };
  const saveLazy = async (v: boolean) => {
    setError('');
    setNote('');
    try {
      onAgent(await client.setLazyInit(agent.id, v));
    } catch (err) {
      setError(messageFor(err));
    }
  };

  return (
    <div class="configure-item">
      <form class="workdir-form" onSubmit={saveDir}>
        <label class="field">
          <span>Working directory</span>
          <input
            id="agent-workdir"
            value={dir}
            placeholder=". (the workspace)"
            onInput={(e) => setDir(e.currentTarget.value)}
            spellcheck={false}
            autoComplete="off"
          />
        </label>
        <button class="btn small" type="submit" id="agent-workdir-save" disabled={busy || dir === (agent.workdir ?? '')}>
          {busy ? 'Saving…' : 'Save'}
        </button>
      </form>
      <p class="muted small">
        "." is the desktop's workspace (/home/cua/workspace) and, for host tools, the runner user's home; a relative path
        starts there; an absolute path is used as it is.
      </p>
      <label class="checkbox">
        <input id="agent-lazy-init" type="checkbox" checked={lazy} onChange={(e) => void saveLazy(e.currentTarget.checked)} />
        <span>
          <span class="checkbox-label">Start the computer at the first tool call</span>
          <span class="muted small">Off: it is made ready before the agent's first model call of each turn.</span>
        </span>
      </label>
      {note !== '' && (
        <p class="muted small" aria-live="polite" id="agent-workdir-note">
          {note}
        </p>
      )}
      {error !== '' && (
        <p class="form-error" role="alert" id="agent-settings-error">
          {error}
        </p>
      )}
    </div>
  );
}
