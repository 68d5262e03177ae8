// The right-hand computer panel of a chat, screen first (issue 16): the live screen of what
// the agent works on — with its state, who controls it and the idle countdown — and the actions
// next to it; below, collapsed, "Configure": the computer type, host access, the working
// directory, the sandbox binding and the agent's model. What each computer type shows follows
// SPEC §7: none a hint, cloud its desktop on the cloud node (or why there is none), Local VM its desktop, host the host's screen (or what is missing),
// browser the page, auto what the latest turn chose.

import type { ComponentChildren } from 'preact';
import type { Agent, Client, ComputerPlan } from '../api';
import { computerLabel } from '../computer';
import type { BusEvent } from '../events';
import { useServerState, type ServerState } from '../hooks';
import { ComputerConfigure } from './ComputerConfigure';
import { NodePicker } from './NodePicker';
import { DesktopActions, DesktopState, useAgentVM } from './DesktopActions';
import { ScreenView } from './ScreenView';

interface ComputerPanelProps {
  client: Client;
  agent: Agent;
  /** Whether the signed-in person is an administrator (links to Settings → Host). */
  admin?: boolean;
  onAgent: (agent: Agent) => void;
  onClose: () => void;
  onOpenDesktop: () => void;
  onOpenDual: () => void;
  desktopOpen: boolean;
  /** Shown under the panel's head (a group chat's member picker). */
  picker?: ComponentChildren;
}

const configureKey = 'cubicle.configureOpen';

/** Whether Configure was left open (remembered per browser). */
function configureOpen(): boolean {
  try {
    return window.localStorage.getItem(configureKey) === '1';
  } catch {
    return false;
  }
}

function rememberConfigure(open: boolean) {
  try {
    window.localStorage.setItem(configureKey, open ? '1' : '0');
  } catch {
    // not remembered; fine
  }
}

/** The computer panel. */
export function ComputerPanel(props: ComputerPanelProps) {
  const { client, agent, onAgent, onClose, picker } = props;
  const usesVM = agent.computer === 'vm' || agent.computer === 'auto';
  return (
    <aside class="computer-panel" id="computer-panel" aria-label="Computer" data-computer={agent.computer}>
      <div class="panel-head">
        <div class="panel-title">
          <h2>Computer</h2>
          <span class="muted small">{agent.name}</span>
        </div>
        <button class="btn ghost small icon" type="button" aria-label="Close computer panel" onClick={onClose}>
          ✕
        </button>
      </div>
      {picker}
      {usesVM ? <VMPanel {...props} /> : <OtherScreen {...props} />}
      <details
        class="panel-section configure"
        id="computer-configure"
        open={configureOpen()}
        onToggle={(e) => rememberConfigure((e.currentTarget as HTMLDetailsElement).open)}
      >
        <summary>
          <span>Configure</span>
          <span class="muted small">
            {computerLabel(agent.computer)}
            {agent.allowHostEnvironment ? ' + host environment' : ''}
          </span>
        </summary>
        <ComputerConfigure client={client} agent={agent} onAgent={onAgent} />
      </details>
    </aside>
  );
}

/** The Local VM (and auto) part: the plan for auto, the screen, the desktop's actions. */
function VMPanel({ client, agent, onOpenDesktop, onOpenDual, desktopOpen }: ComputerPanelProps) {
  const vm = useAgentVM(client, agent.id);
  const plan = usePlan(client, agent);
  const chose = plan.data?.last?.computer;
  if (agent.computer === 'auto' && chose === 'browser') {
    return (
      <>
        <PlanLine plan={plan.data} />
        <section class="panel-section screen-first" id="computer-screen">
          <ScreenView client={client} agentId={agent.id} variant="panel" onPreviewClick={onOpenDesktop} />
        </section>
      </>
    );
  }
  return (
    <>
      {agent.computer === 'auto' && <PlanLine plan={plan.data} />}
      <section class="panel-section screen-first" id="local-vm-panel" aria-label="Local VM" data-state={vm.data?.desktop.state ?? ''}>
        {desktopOpen ? (
          <div class="screen-moved">
            <DesktopState vm={vm.data} />
            <p class="muted small">The desktop is open in the main area.</p>
          </div>
        ) : (
          <ScreenView
            client={client}
            agentId={agent.id}
            variant="panel"
            label={<DesktopState vm={vm.data} />}
            onPreviewClick={onOpenDesktop}
          />
        )}
        <NodePicker client={client} agentId={agent.id} onMoved={() => void vm.reload()} />
        <DesktopActions client={client} agentId={agent.id} vm={vm} onOpenDesktop={onOpenDesktop} onOpenDual={onOpenDual} />
      </section>
    </>
  );
}

/** The plan of an auto agent's turns, loaded again when the agent changes. */
function usePlan(client: Client, agent: Agent): ServerState<ComputerPlan> {
  return useServerState(() => client.computerPlan(agent.id), [client, agent.id, agent.computer], {
    when: (e: BusEvent) => (e.type === 'agent.changed' && e.data.agentId === agent.id) || e.type === 'images.changed' || e.type === 'node.changed',
  });
}

/** What auto chose (the latest turn) and would choose now. */
function PlanLine({ plan }: { plan: ComputerPlan | null }) {
  if (!plan) return null;
  const last = plan.last;
  return (
    <section class="panel-section plan-line" id="computer-plan">
      <p class="small">
        {last ? (
          <>
            Auto chose <strong>{last.label}</strong> for the latest turn{last.reason ? ` — ${last.reason}` : ''}.
          </>
        ) : (
          <>No turn yet.</>
        )}{' '}
        <span class="muted">
          Next turn: {plan.next.label}
          {plan.next.reason ? ` (${plan.next.reason})` : ''}.
        </span>
      </p>
    </section>
  );
}

/** Host, browser, none and cloud. */
function OtherScreen({ client, agent, admin, onOpenDesktop }: ComputerPanelProps) {
  switch (agent.computer) {
    case 'host':
      return <HostScreen client={client} agent={agent} admin={admin} onOpenDesktop={onOpenDesktop} />;
    case 'cloud':
      return <CloudScreen client={client} agent={agent} onOpenDesktop={onOpenDesktop} />;
    case 'browser':
      return (
        <section class="panel-section screen-first" id="computer-screen" data-kind="browser">
          <ScreenView client={client} agentId={agent.id} variant="panel" onPreviewClick={onOpenDesktop} label={<span class="badge">Browser</span>} />
          <p class="muted small">The agent's own browser. It starts with the agent's first browser action.</p>
        </section>
      );
  }
  return (
    <section class="panel-section">
      <div class="empty-state screen-empty" id="computer-empty">
        <svg viewBox="0 0 32 32" width="36" height="36" aria-hidden="true">
          <rect x="3" y="5" width="26" height="18" rx="3" fill="none" stroke="currentColor" stroke-width="2" />
          <rect x="11" y="25" width="10" height="3" rx="1" fill="currentColor" />
        </svg>
        <p class="empty-title">{`No computer (${computerLabel(agent.computer)})`}</p>
        <p class="muted small">This agent only chats. Choose a computer under Configure to give it a desktop, a browser or the host.</p>
      </div>
    </section>
  );
}

/**
 * A cloud computer: its desktop on the cloud node (it starts with the agent's first cloud
 * action), or why no cloud node serves it.
 */
function CloudScreen({ client, agent, onOpenDesktop }: Pick<ComputerPanelProps, 'client' | 'agent' | 'onOpenDesktop'>) {
  const plan = usePlan(client, agent);
  const next = plan.data?.next;
  if (next && !next.unavailable && next.cloudNode) {
    return (
      <section class="panel-section screen-first" id="computer-screen" data-kind="cloud">
        <ScreenView client={client} agentId={agent.id} variant="panel" onPreviewClick={onOpenDesktop} label={<span class="badge">Cloud desktop</span>} />
        <p class="muted small" id="cloud-node">
          On cloud node <code>{next.cloudNode}</code>. It starts with the agent's first cloud action.
        </p>
      </section>
    );
  }
  return (
    <section class="panel-section">
      <div class="empty-state screen-empty" id="computer-empty">
        <p class="empty-title">No cloud desktop is connected</p>
        <p class="muted small">
          {next?.reason ?? 'No cloud execution node is connected yet.'} Choose Local VM under Configure to work on this machine.
        </p>
      </div>
    </section>
  );
}

/**
 * The host's own screen, view only until someone takes over; when the agent's host desktop
 * tools are not offered, what is missing and how to grant it (the plan says; it follows
 * Settings → Host through the event stream).
 */
function HostScreen({ client, agent, admin, onOpenDesktop }: Pick<ComputerPanelProps, 'client' | 'agent' | 'admin' | 'onOpenDesktop'>) {
  const plan = usePlan(client, agent);
  const problem = plan.data?.next.hostDesktopProblem ?? '';
  return (
    <section class="panel-section screen-first" id="computer-screen" data-kind="host">
      <ScreenView client={client} agentId={agent.id} variant="panel" onPreviewClick={onOpenDesktop} label={<span class="badge">Host screen</span>} />
      {problem !== '' ? (
        <p class="form-error small" id="host-missing">
          Host desktop tools are not available: {problem}.
          {admin && (
            <>
              {' '}
              <a href="#/settings/host">Settings → Host</a>
            </>
          )}
        </p>
      ) : (
        plan.data && (
          <p class="muted small" id="host-available-note">
            The agent sees and operates this screen (every action asks first unless the safety level is off).
          </p>
        )
      )}
      <p class="muted small" id="host-note">
        The execution node's own screen: view only until you take over. Host command and file tools work either way.
      </p>
    </section>
  );
}
