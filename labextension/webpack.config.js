// Extra rspack configuration that jupyter-builder merges into its own (package.json's
// `jupyterlab.webpackConfig`). Only in production: the development build stays readable in the
// browser's inspector. Issue 19 caps the bundle at 120 KiB, so two things the builder leaves
// alone are done here:
// - CSS: JupyterLab's builder ships it as written, comments and indentation included (a quarter
//   of our bundle): Rspack's built-in Lightning CSS loader minifies it before css-loader sees it.
//   No `targets`: nothing is rewritten for older browsers, the rules stay the ones we wrote.
// - Private method names: every `private` member of ours starts with `_`, and SWC's property
//   mangling shortens the methods among them (about 2 KiB). SWC renames a name everywhere in the
//   chunk or nowhere, so a caller and its method stay in step. `reserved` lists the underscore
//   names we call on objects that are not ours (@jupyterlab/services' comm hook, the
//   translation bundle's plural form); tests/live/test_bundle_size.py fails when one is missing.
const development = process.argv.includes('--development');

module.exports = development
  ? {}
  : {
      module: {
        rules: [
          {
            test: /(?<!\.raw)\.css$/,
            enforce: 'pre',
            use: [
              {
                loader: 'builtin:lightningcss-loader',
                options: { minify: true }
              }
            ]
          }
        ]
      },
      optimization: {
        minimizer: [
          new (require('@rspack/core').rspack.SwcJsMinimizerRspackPlugin)({
            minimizerOptions: {
              mangle: {
                props: {
                  regex: '^_[a-zA-Z]',
                  reserved: ['_handleCommOpen', '_n']
                }
              }
            }
          })
        ]
      }
    };
