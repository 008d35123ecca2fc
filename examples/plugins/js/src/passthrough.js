// passthrough-js: lets every change through as it came.
//
// A Tributary transform plugin (WIT world `tributary:transform/transform@1.0.0`), built into a
// WebAssembly component with `jco componentize`. The module's `plugin` export implements the
// WIT interface `plugin`; see README.md for how WIT types look in JavaScript.

const NAME = 'passthrough-js';
const VERSION = '1.0.0';

// An error the host receives as the `err` case of a `result`: the bindings hand on the
// thrown value's own `payload` property. (A plain Error without one makes the call trap.)
class Refusal extends Error {
  constructor(message) {
    super(message);
    this.payload = message;
  }
}

export const plugin = {
  describe() {
    return { name: NAME, version: VERSION };
  },

  init(config) {
    if (config.length > 0) {
      const names = config.map(([key]) => `\`${key}\``).join(', ');
      throw new Refusal(`${NAME} takes no settings; remove ${names} from its config`);
    }
    return {
      outputs: [],
      reshapes: [],
      interest: {
        // Some(empty list): read no column values (they arrive as `absent`). `undefined`
        // would be `none`, which means every column; a list of names reads those.
        columns: [],
        oldImages: false,
        messages: false,
        wholeTransactions: false,
      },
    };
  },

  process(batch) {
    const emits = [];
    batch.transactions.forEach((tx, transaction) => {
      for (let change = 0; change < tx.changes.length; change++) {
        // Edit here: decide what lands for each change. `keep` lands it as it came;
        // { tag: 'edit', val: { change: ref, values: [[position, value]], old: [] } }
        // replaces some values; { tag: 'row', val: ... } spells a row out whole.
        emits.push({ tag: 'keep', val: { transaction, change } });
      }
    });
    return { emits, rejections: [] };
  },
};
