// The live screen v2 flow (live.test.mjs) once more over the exec link
// (CUBICLE_GUEST_LINK=exec), the reference screenshots through the driver's relay in an exec
// session. Its own file so that it runs beside the other browser tests, in its own process; its
// suite and artifacts are marked "(exec link)" / "-exec".
process.env.CUBICLE_GUEST_LINK = 'exec';
await import('./live.test.mjs');
