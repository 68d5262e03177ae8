// Turns failures into sentences a person can act on.

import { ApiError } from './api';

/** The message to show for a failed call. The server's own message wins when it has one. */
export function messageFor(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof Error && err.message !== '') return err.message;
  return 'Something went wrong. Try again.';
}
