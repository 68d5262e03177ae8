// Small Preact hooks shared by the pages.

import { useEffect, useState } from 'preact/hooks';
import { parseRoute, type Route } from './router';

/** The current hash route, updated on hashchange. */
export function useHashRoute(): Route {
  const [route, setRoute] = useState<Route>(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

/** Sets the document title for the page. */
export function useTitle(title: string): void {
  useEffect(() => {
    document.title = title === '' ? 'Cubicle' : `${title} · Cubicle`;
  }, [title]);
}
