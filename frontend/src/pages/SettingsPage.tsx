// Settings (admin only): Getting started (the first-run panel, components/SetupPanel), Local VM (engine report, image preparation, isolation and idle
// policies, instances), Model (the chat model), Users (accounts, roles, host access),
// Security (the safety layers), Tools (MCP servers agents use) and Runners (execution nodes). The sections live in src/settings/.

import type { Client, User } from '../api';
import { SetupPanel } from '../components/SetupPanel';
import { useTitle } from '../hooks';
import type { SettingsSection } from '../router';
import { Forbidden } from '../settings/Forbidden';
import { HostSettings } from '../settings/HostSettings';
import { LocalVMSettings } from '../settings/LocalVMSettings';
import { KnowledgeSettings } from '../settings/KnowledgeSettings';
import { ModelSettingsForm } from '../components/ModelSettingsForm';
import { RunnersSettings } from '../settings/RunnersSettings';
import { SecuritySettingsSection } from '../settings/SecuritySettings';
import { ToolsSettings } from '../settings/ToolsSettings';
import { UsersSettings } from '../settings/UsersSettings';

const sections: Array<{ id: SettingsSection; label: string }> = [
  { id: 'setup', label: 'Getting started' },
  { id: 'local-vm', label: 'Local VM' },
  { id: 'model', label: 'Model' },
  { id: 'users', label: 'Users' },
  { id: 'security', label: 'Security' },
  { id: 'tools', label: 'Tools' },
  { id: 'host', label: 'Host' },
  { id: 'runners', label: 'Runners' },
];

interface SettingsPageProps {
  client: Client;
  user: User;
  section: SettingsSection;
}

/** The Settings page with its section navigation. */
export function SettingsPage({ client, user, section }: SettingsPageProps) {
  useTitle('Settings');
  return (
    <main class="page settings">
      <div class="page-head">
        <h1>Settings</h1>
      </div>
      <div class="settings-layout">
        <nav class="settings-nav" aria-label="Settings sections">
          {sections.map((s) => (
            <a
              key={s.id}
              href={`#/settings/${s.id}`}
              id={`settings-nav-${s.id}`}
              class={section === s.id ? 'active' : ''}
              aria-current={section === s.id ? 'page' : undefined}
            >
              {s.label}
            </a>
          ))}
        </nav>
        <div class="settings-body">
          {section === 'setup' ? (
            <SetupPanel client={client} user={user} standalone />
          ) : user.role !== 'admin' ? (
            <Forbidden />
          ) : section === 'model' ? (
            <>
              <ModelSettingsForm scope="app" client={client} />
              <KnowledgeSettings client={client} />
            </>
          ) : section === 'users' ? (
            <UsersSettings client={client} user={user} />
          ) : section === 'security' ? (
            <SecuritySettingsSection client={client} />
          ) : section === 'tools' ? (
            <ToolsSettings client={client} />
          ) : section === 'host' ? (
            <HostSettings client={client} />
          ) : section === 'runners' ? (
            <RunnersSettings client={client} />
          ) : (
            <LocalVMSettings client={client} />
          )}
        </div>
      </div>
    </main>
  );
}
