import { LabIcon } from '@jupyterlab/ui-components';

/** A GPU card with a queue of three jobs: the panel's sidebar icon. */
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M2 5h17a2 2 0 0 1 2 2v1h1.5v2H21v4h1.5v2H21v1a2 2 0 0 1-2 2H8v2H6v-2H4v2H2zm2 2v10h15V7zm2 2h7v6H6zm9 0h2v2h-2zm0 4h2v2h-2z"/>
  </g>
</svg>`;

export const gpuQueueIcon = new LabIcon({
  name: 'jupyter-gpuqueue:gpu',
  svgstr
});
