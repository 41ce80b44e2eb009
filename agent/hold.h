/* hold.h - keep a loaded model alive until the caller is told to let go:
 * `--hold` in tetris-agent and tetris-onnx-run, so a demo or benchmark can
 * measure processes that hold a model. */
#ifndef TETRIS_HOLD_H
#define TETRIS_HOLD_H

/* Blocks SIGTERM and SIGINT in the calling thread and in the threads it
 * starts later: call it before a load starts any, so that none of them
 * takes a signal meant for hold_until_released (which would then wait on). */
void hold_block_signals(void);

/* Blocks until stdin reaches end of file or SIGTERM/SIGINT arrives.
 * Returns the signal number, or 0 for end of file. */
int hold_until_released(void);

#endif
