import { describe, expect, it, vi } from 'vitest';
import { detectShell, type DesktopWindow } from './shell';

describe('detectShell', () => {
  it('a plain browser is the web shell', async () => {
    await expect(detectShell({})).resolves.toEqual({ kind: 'web' });
    await expect(detectShell({ go: { app: {} } })).resolves.toEqual({ kind: 'web' });
  });

  it('the desktop window connects with its URL and token', async () => {
    const ready = vi.fn();
    const handlers: Record<string, (...d: unknown[]) => void> = {};
    const win: DesktopWindow = {
      go: { app: { App: { Connection: async () => ({ url: 'http://127.0.0.1:5000', token: 't0k' }), Ready: ready } } },
      runtime: { EventsOn: (name, cb) => (handlers[name] = cb) },
    };
    const shell = await detectShell(win);
    if (shell.kind !== 'desktop') throw new Error('expected the desktop shell');
    expect(shell.connection).toEqual({ url: 'http://127.0.0.1:5000', token: 't0k' });

    shell.ready();
    expect(ready).toHaveBeenCalledTimes(1);
    shell.navigated('#/agents'); // no Navigated binding: nothing happens

    const seen: string[] = [];
    shell.onNavigate((h) => seen.push(h));
    handlers['navigate']('#/settings/local-vm');
    handlers['navigate'](42); // ignored: not a route
    expect(seen).toEqual(['#/settings/local-vm']);
  });

  it('a desktop window without Ready or EventsOn still works', async () => {
    const shell = await detectShell({ go: { app: { App: { Connection: async () => ({ url: 'http://x', token: '' }) } } } });
    if (shell.kind !== 'desktop') throw new Error('expected the desktop shell');
    expect(() => shell.ready()).not.toThrow();
    expect(() => shell.onNavigate(() => {})).not.toThrow();
  });

  it('reports route changes through Navigated', async () => {
    const navigated = vi.fn();
    const shell = await detectShell({
      go: { app: { App: { Connection: async () => ({ url: 'http://x', token: 't' }), Navigated: navigated } } },
    });
    if (shell.kind !== 'desktop') throw new Error('expected the desktop shell');
    shell.navigated('#/settings/local-vm');
    expect(navigated).toHaveBeenCalledWith('#/settings/local-vm');
  });

  it('a throwing binding does not throw', async () => {
    const shell = await detectShell({
      go: {
        app: {
          App: {
            Connection: async () => ({ url: 'http://x', token: 't' }),
            Navigated: () => {
              throw new Error('x');
            },
          },
        },
      },
    });
    if (shell.kind !== 'desktop') throw new Error('expected the desktop shell');
    expect(() => shell.navigated('#/agents')).not.toThrow();
  });

  it('a rejected Ready does not throw', async () => {
    const shell = await detectShell({
      go: { app: { App: { Connection: async () => ({ url: 'http://x', token: 't' }), Ready: () => Promise.reject(new Error('x')) } } },
    });
    if (shell.kind !== 'desktop') throw new Error('expected the desktop shell');
    expect(() => shell.ready()).not.toThrow();
  });

  const bad: Array<{ name: string; conn: unknown }> = [
    { name: 'null', conn: null },
    { name: 'no url', conn: { url: '', token: 't' } },
    { name: 'token not a string', conn: { url: 'http://x', token: 5 } },
  ];
  for (const tc of bad) {
    it(`a bad connection is an error: ${tc.name}`, async () => {
      const win = { go: { app: { App: { Connection: async () => tc.conn } } } } as unknown as DesktopWindow;
      await expect(detectShell(win)).rejects.toThrow(/no backend connection/);
    });
  }

  it('a failing binding is an error, not a silent web login', async () => {
    const win: DesktopWindow = { go: { app: { App: { Connection: () => Promise.reject(new Error('boom')) } } } };
    await expect(detectShell(win)).rejects.toThrow('boom');
  });
});
