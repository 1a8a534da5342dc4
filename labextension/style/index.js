import './base.css';
import './cells.css';
