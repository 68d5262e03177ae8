// The big desktop views of the chat page's main area: the interactive desktop ("Open
// desktop"), the dual desktop (two agents' desktops side by side, view only on entry), and
// the phone's black full-screen computer view (SPEC §1.4, §1.8).

import { useRef, useState } from 'preact/hooks';
import type { Agent, Client } from '../api';
import { refusalText, type ChannelError, type Lease } from '../screen';
import { DesktopActions, DesktopState, useAgentVM } from './DesktopActions';
import { ScreenView, type ScreenHandle } from './ScreenView';

/** A Local VM desktop's actions (Stop, Recreate, Remove instance) next to a big screen. */
function VMButtons({ client, agentId }: { client: Client; agentId: string }) {
  const vm = useAgentVM(client, agentId);
  return (
    <div class="view-actions">
      <DesktopState vm={vm.data} />
      <DesktopActions client={client} agentId={agentId} vm={vm} />
    </div>
  );
}

/** The interactive view of one desktop: takes over on open, hands back on close. */
export function InteractiveDesktop({ client, agent, onClose }: { client: Client; agent: Agent; onClose: () => void }) {
  const vmAgent = agent.computer === 'vm' || agent.computer === 'auto';
  return (
    <section class="desktop-view" id="interactive-desktop" aria-label={`${agent.name}'s desktop`}>
      <header class="desktop-head">
        <h2>{agent.name}'s desktop</h2>
        <button class="btn small" type="button" id="desktop-close" onClick={onClose}>
          Close (hand back)
        </button>
      </header>
      <ScreenView
        client={client}
        agentId={agent.id}
        variant="full"
        autoTakeOver
        actions={vmAgent ? <VMButtons client={client} agentId={agent.id} /> : undefined}
      />
    </section>
  );
}

/** Two desktops side by side; switching which one you operate hands back the other first. */
export function DualDesktop({ client, agents, agentId, onClose }: { client: Client; agents: Agent[]; agentId: string; onClose: () => void }) {
  const vms = agents.filter((a) => a.computer === 'vm');
  const others = vms.filter((a) => a.id !== agentId);
  const [left, setLeft] = useState(agentId);
  const [right, setRight] = useState(others[0]?.id ?? '');
  const handles = useRef(new Map<string, { h: ScreenHandle; lease: Lease | null }>());

  const onHandle = (h: ScreenHandle, lease: Lease | null) => {
    handles.current.set(h.agentId, { h, lease });
  };

  // Take over one side: if the other side is operated, switch (the server hands it back first).
  const takeOver = async (h: ScreenHandle): Promise<string> => {
    const other = [...handles.current.values()].find((x) => x.h.agentId !== h.agentId && x.lease !== null);
    const r = other && other.lease ? await h.channel.switchFrom(other.h.agentId, other.lease.token) : await h.channel.takeOver();
    // On a switch the server hands the other desktop back; its status then clears that lease.
    if (r.type === 'error') return refusalText(r as ChannelError, h.channel.status);
    return '';
  };

  const picker = (value: string, set: (v: string) => void, id: string) => (
    <select id={id} class="dual-pick" value={value} onChange={(e) => set(e.currentTarget.value)} aria-label="Agent">
      {vms.map((a) => (
        <option key={a.id} value={a.id}>
          {a.name}
        </option>
      ))}
      {value === '' && <option value="">Choose an agent</option>}
    </select>
  );

  return (
    <section class="desktop-view dual" id="dual-desktop" aria-label="Dual desktop">
      <header class="desktop-head">
        <h2>Dual desktop</h2>
        <span class="muted small">View only until you take over one side; taking over the other hands the first back.</span>
        <button class="btn small" type="button" id="dual-close" onClick={onClose}>
          Close
        </button>
      </header>
      <div class="dual-grid">
        {[
          { v: left, set: setLeft, id: 'dual-left' },
          { v: right, set: setRight, id: 'dual-right' },
        ].map((side) => (
          <div class="dual-side" key={side.id} id={side.id}>
            {side.v === '' ? (
              <div class="screen-placeholder static">
                <p>
                  {vms.length < 2
                    ? 'Only one of your agents uses a Local VM. Choose Local VM for another agent to watch two desktops.'
                    : 'Choose an agent.'}
                </p>
                {vms.length >= 2 && picker(side.v, side.set, `${side.id}-pick`)}
              </div>
            ) : (
              <ScreenView
                key={side.v}
                client={client}
                agentId={side.v}
                variant="dual"
                label={picker(side.v, side.set, `${side.id}-pick`)}
                takeOver={takeOver}
                onHandle={onHandle}
                actions={<VMButtons client={client} agentId={side.v} />}
              />
            )}
          </div>
        ))}
      </div>
    </section>
  );
}

/**
 * The phone's computer view (SPEC §1.8): black, full screen, original aspect ratio; top bar
 * with the agent's name, shared badge and status; take over / hand back at the bottom. An agent
 * without a computer here shows the hint to configure one on a wider screen; phones never
 * create a desktop.
 */
export function MobileComputer({ client, agent, onClose }: { client: Client; agent: Agent; onClose: () => void }) {
  const screenKind = agent.computer === 'host' || agent.computer === 'browser';
  const vmKind = agent.computer === 'vm' || agent.computer === 'auto';
  return (
    <div class="mobile-computer" id="mobile-computer" role="dialog" aria-label={`${agent.name}'s computer`}>
      {vmKind ? (
        <MobileVM client={client} agent={agent} onClose={onClose} />
      ) : screenKind ? (
        <MobileScreen client={client} agent={agent} onClose={onClose} />
      ) : (
        <MobileHint agent={agent} onClose={onClose} text={`${agent.name} has no computer here.`} />
      )}
    </div>
  );
}

function MobileVM({ client, agent, onClose }: { client: Client; agent: Agent; onClose: () => void }) {
  const vm = useAgentVM(client, agent.id);
  if (vm.data === null && vm.error === '') {
    return (
      <div class="mobile-empty">
        <p class="muted">Loading {agent.name}'s computer…</p>
      </div>
    );
  }
  const state = vm.data?.desktop.state ?? '';
  if (vm.error !== '' || state === '' || state === 'absent') {
    return <MobileHint agent={agent} onClose={onClose} text={vm.error !== '' ? vm.error : `${agent.name} has no computer yet.`} />;
  }
  return <MobileScreen client={client} agent={agent} onClose={onClose} />;
}

function MobileScreen({ client, agent, onClose }: { client: Client; agent: Agent; onClose: () => void }) {
  return (
    <ScreenView
      client={client}
      agentId={agent.id}
      variant="mobile"
      label={<strong class="mobile-name">{agent.name}</strong>}
      actions={
        <button class="btn ghost small" type="button" id="mobile-close" onClick={onClose}>
          Close
        </button>
      }
    />
  );
}

function MobileHint({ agent, onClose, text }: { agent: Agent; onClose: () => void; text: string }) {
  return (
    <>
      <div class="mobile-top">
        <strong>{agent.name}</strong>
        <button class="btn ghost small" type="button" id="mobile-close" onClick={onClose} aria-label="Close">
          ✕
        </button>
      </div>
      <div class="mobile-empty" id="mobile-no-computer">
        <p>{text}</p>
        <p class="muted small">Configure a computer for this agent on the desktop app or a wider screen.</p>
      </div>
    </>
  );
}
