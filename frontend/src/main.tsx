// Entry point: find the shell (browser or desktop window), build the API client, render.

import { render } from 'preact';
import { Client } from './api';
import { App } from './app';
import { isAppRoute } from './router';
import { detectShell, type DesktopWindow } from './shell';
import './styles.css';
import './workspace.css';

const unauthenticatedEvent = 'cubicle:unauthenticated';

async function start(root: HTMLElement): Promise<void> {
  let shell;
  try {
    shell = await detectShell(window as unknown as DesktopWindow);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    root.innerHTML = '';
    const box = document.createElement('div');
    box.className = 'boot boot-error';
    box.setAttribute('role', 'alert');
    box.textContent = `Cubicle could not connect to its backend: ${why} Restart the app.`;
    root.append(box);
    return;
  }
  const onUnauthenticated = () => window.dispatchEvent(new Event(unauthenticatedEvent));
  const client =
    shell.kind === 'desktop'
      ? new Client({ baseUrl: shell.connection.url, token: shell.connection.token, onUnauthenticated })
      : new Client({ onUnauthenticated });
  if (shell.kind === 'desktop') {
    // The app menu ("Local VM settings…") asks for a route; anything else is ignored.
    shell.onNavigate((hash) => {
      if (isAppRoute(hash)) window.location.hash = hash;
    });
  }
  root.innerHTML = '';
  render(<App client={client} shell={shell} unauthenticatedEvent={unauthenticatedEvent} />, root);
}

void start(document.getElementById('app')!);
