// Extra rspack configuration that jupyter-builder merges into its own (package.json's
// `jupyterlab.webpackConfig`). JupyterLab's builder minifies JavaScript in a production build
// but ships CSS as written, comments and indentation included (a quarter of our bundle, issue
// 19): Rspack's built-in Lightning CSS loader minifies it before css-loader sees it. Only in
// production: the development build keeps the CSS readable in the browser's inspector.
// No `targets`: nothing is rewritten for older browsers, the rules stay the ones we wrote.
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
      }
    };
