// The real desktop flow (desktop.test.mjs) once more with the desktop reached over the exec
// link (CUBICLE_GUEST_LINK=exec: no socket on the host, the driver's relay in an exec session;
// issue 10, both guest transports). Its own file so that it runs beside the other browser
// tests, in its own process; its suite and artifacts are marked "(exec link)" / "-exec".
process.env.CUBICLE_GUEST_LINK = 'exec';
await import('./desktop.test.mjs');
