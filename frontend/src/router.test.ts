import { describe, expect, it } from 'vitest';
import { hrefFor, isAppRoute, parseRoute, type Route } from './router';

describe('parseRoute', () => {
  const cases: Array<{ name: string; hash: string; want: Route }> = [
    { name: 'empty is agents', hash: '', want: { name: 'agents' } },
    { name: 'bare hash', hash: '#', want: { name: 'agents' } },
    { name: 'root', hash: '#/', want: { name: 'agents' } },
    { name: 'login', hash: '#/login', want: { name: 'login' } },
    { name: 'agents', hash: '#/agents', want: { name: 'agents' } },
    { name: 'trailing slash', hash: '#/agents/', want: { name: 'agents' } },
    { name: 'agent', hash: '#/agents/abc123', want: { name: 'agent', id: 'abc123' } },
    { name: 'agent escaped id', hash: '#/agents/a%20b', want: { name: 'agent', id: 'a b' } },
    { name: 'settings', hash: '#/settings', want: { name: 'settings', section: 'local-vm' } },
    { name: 'local vm settings', hash: '#/settings/local-vm', want: { name: 'settings', section: 'local-vm' } },
    { name: 'model settings', hash: '#/settings/model', want: { name: 'settings', section: 'model' } },
    { name: 'getting started', hash: '#/settings/setup', want: { name: 'settings', section: 'setup' } },
    { name: 'host settings', hash: '#/settings/host', want: { name: 'settings', section: 'host' } },
    { name: 'runners settings', hash: '#/settings/runners', want: { name: 'settings', section: 'runners' } },
    { name: 'users settings', hash: '#/settings/users', want: { name: 'settings', section: 'users' } },
    { name: 'security settings', hash: '#/settings/security', want: { name: 'settings', section: 'security' } },
    { name: 'account', hash: '#/account', want: { name: 'account' } },
    { name: 'account too deep', hash: '#/account/x', want: { name: 'not-found', hash: '#/account/x' } },
    { name: 'unknown settings section', hash: '#/settings/other', want: { name: 'not-found', hash: '#/settings/other' } },
    { name: 'too deep', hash: '#/agents/a/b', want: { name: 'not-found', hash: '#/agents/a/b' } },
    { name: 'bad escape', hash: '#/agents/%E0%A4%A', want: { name: 'not-found', hash: '#/agents/%E0%A4%A' } },
    { name: 'unknown', hash: '#/nope', want: { name: 'not-found', hash: '#/nope' } },
  ];
  for (const tc of cases) {
    it(tc.name, () => expect(parseRoute(tc.hash)).toEqual(tc.want));
  }
});

describe('hrefFor', () => {
  const routes: Route[] = [
    { name: 'login' },
    { name: 'agents' },
    { name: 'agent', id: 'x/y z' },
    { name: 'settings', section: 'local-vm' },
    { name: 'settings', section: 'security' },
    { name: 'account' },
  ];
  for (const r of routes) {
    it(`round-trips ${JSON.stringify(r)}`, () => expect(parseRoute(hrefFor(r))).toEqual(r));
  }
});

describe('isAppRoute', () => {
  const cases: Array<{ name: string; value: unknown; want: boolean }> = [
    { name: 'settings route', value: '#/settings/local-vm', want: true },
    { name: 'agent route', value: '#/agents/1', want: true },
    { name: 'unknown route', value: '#/bogus', want: false },
    { name: 'not a hash', value: 'https://example.com/', want: false },
    { name: 'javascript url', value: 'javascript:alert(1)', want: false },
    { name: 'not a string', value: 42, want: false },
  ];
  for (const tc of cases) {
    it(tc.name, () => expect(isAppRoute(tc.value)).toBe(tc.want));
  }
});
