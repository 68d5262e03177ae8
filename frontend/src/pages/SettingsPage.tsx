// Settings (admin only): Local VM (engine report, image preparation, isolation and idle
// policies, instances), Model (the chat model) and Runners (execution nodes). The sections live in src/settings/.

import type { Client, User } from '../api';
import { useTitle } from '../hooks';
import type { SettingsSection } from '../router';
import { Forbidden } from '../settings/Forbidden';
import { LocalVMSettings } from '../settings/LocalVMSettings';
import { ModelSettingsSection } from '../settings/ModelSettings';
import { RunnersSettings } from '../settings/RunnersSettings';

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
          <a
            href="#/settings/local-vm"
            id="settings-nav-local-vm"
            class={section === 'local-vm' ? 'active' : ''}
            aria-current={section === 'local-vm' ? 'page' : undefined}
          >
            Local VM
          </a>
          <a
            href="#/settings/model"
            id="settings-nav-model"
            class={section === 'model' ? 'active' : ''}
            aria-current={section === 'model' ? 'page' : undefined}
          >
            Model
          </a>
          <a
            href="#/settings/runners"
            id="settings-nav-runners"
            class={section === 'runners' ? 'active' : ''}
            aria-current={section === 'runners' ? 'page' : undefined}
          >
            Runners
          </a>
        </nav>
        <div class="settings-body">
          {user.role === 'admin' ? (
            section === 'model' ? (
              <ModelSettingsSection client={client} />
            ) : section === 'runners' ? (
              <RunnersSettings client={client} />
            ) : (
              <LocalVMSettings client={client} />
            )
          ) : (
            <Forbidden />
          )}
        </div>
      </div>
    </main>
  );
}
