// Helpers shared by the client checks under clients/ (plain Node, no packages).
import { createServer } from "node:net";

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a
// `flywheel serve --addr` of the check's own.
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}
